"""rxu <-> kernel rxe interop matrix (scripts/interop/run)."""
