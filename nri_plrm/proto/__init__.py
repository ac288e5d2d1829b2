"""Generated protobuf modules (do not edit; run scripts/gen_protos.py)."""
