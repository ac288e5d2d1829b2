"""ttrpc and the NRI connection multiplexer: a sans-IO codec plus a thin asyncio transport."""
