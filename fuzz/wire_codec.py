"""Coverage-guided fuzzing (atheris / libFuzzer) of the wire codec: mux frames, ttrpc
envelopes and the NRI request payloads the stub decodes.

One input is split by its first bytes into chunk sizes, fed to a ``MuxDecoder`` chunk by chunk
(as a socket delivers it), every complete message is decoded as a ttrpc Request or Response,
Request payloads are parsed as the NRI request of their method, and the plugin's NRI-only
inference runs on every decoded pod and container. The only exceptions allowed are the codec's
``ProtocolError``, ``TtrpcError`` for error statuses, protobuf's ``DecodeError`` and the
plugin's ``IntentError`` (resources no kubelet would send); the decoder must never hold more
than one frame plus one partial message per connection. Anything else is a crash libFuzzer
reports with the input that caused it.

Run (bounded, as CI does)::

    python fuzz/wire_codec.py -max_total_time=30 -rss_limit_mb=1024 fuzz/corpus/wire_codec

The seed corpus directory is filled from the recorded containerd captures on first run.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

with atheris.instrument_imports():
    from google.protobuf.message import DecodeError
    from nrisim.capture import REQUEST_TYPES

    from nri_plrm.proto import nri_api_pb2 as api
    from nri_plrm.translate.nri_to_pod import IntentError, container_spec, pod_intent
    from nri_plrm.ttrpc.codec import (
        MAX_FRAME_LEN,
        MAX_MESSAGE_LEN,
        MUX_HEADER_LEN,
        MuxDecoder,
        ProtocolError,
    )
    from nri_plrm.ttrpc.messages import TtrpcError, decode_request, decode_response

MEMORY_BOUND = MUX_HEADER_LEN + MAX_FRAME_LEN + 2 * (MAX_FRAME_LEN + MAX_MESSAGE_LEN)
MSG_REQUEST = 1


def chunks(data: bytes) -> list[bytes]:
    """Split ``data`` as a socket might: the first 4 bytes choose up to 4 cut points."""
    if len(data) < 4:
        return [data]
    body = data[4:]
    cuts = sorted({b * len(body) // 256 for b in data[:4]} | {0, len(body)})
    return [body[a:b] for a, b in itertools.pairwise(cuts)]


def one_input(data: bytes) -> None:
    """The libFuzzer target."""
    decoder = MuxDecoder()
    for piece in chunks(data):
        try:
            messages = decoder.feed(piece)
        except ProtocolError:
            return
        if decoder.buffered > MEMORY_BOUND:
            raise AssertionError(f"decoder holds {decoder.buffered} bytes > {MEMORY_BOUND}")
        for msg in messages:
            try:
                if msg.type == MSG_REQUEST:
                    req = decode_request(msg.data)
                    kind = REQUEST_TYPES.get(req.method)
                    if kind is not None:
                        infer(kind.FromString(req.payload))
                else:
                    decode_response(msg.data)
            except (ProtocolError, TtrpcError, DecodeError, IntentError):
                continue


def infer(request: object) -> None:
    """What the plugin infers from a pod and container it receives (NRI-only mode)."""
    pod = getattr(request, "pod", None)
    if not isinstance(pod, api.PodSandbox):
        return
    intent = pod_intent(pod)
    container = getattr(request, "container", None)
    if isinstance(container, api.Container):
        container_spec(intent, container)


def seed_corpus(folder: Path) -> None:
    """Put the recorded trunks (both directions of every capture) into ``folder`` once."""
    if folder.exists() and any(folder.iterdir()):
        return
    from nrisim import capture_folders
    from nrisim.capture import capture_dir

    folder.mkdir(parents=True, exist_ok=True)
    for name in capture_folders():
        for direction in ("rx", "tx"):
            trunk = (capture_dir() / name / f"trunk-{direction}.bin").read_bytes()
            (folder / f"{name}-{direction}").write_bytes(b"\0\0\0\0" + trunk[:65536])


def main() -> None:
    """Seed the corpus directory given on the command line (if any), then fuzz."""
    dirs = [a for a in sys.argv[1:] if not a.startswith("-")]
    for d in dirs:
        seed_corpus(Path(d))
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
