"""Host side of the sandbox: build and cache the guest component, run it under wasmtime."""

from wasm_sandbox.limits import Limits

__all__ = ["Limits"]
