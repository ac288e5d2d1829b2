"""Generic helpers that know nothing of the plugin: bounded file reads, work in steps, a token
bucket, a small HTTP server."""
