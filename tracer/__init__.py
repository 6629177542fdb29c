"""The guest side of steptrace: the sys.monitoring tracer that runs inside the sandbox.

The modules here run in the WebAssembly guest (componentize-py's CPython for WASI) and use
only the standard library; the host never imports them. This package exists so the host
can find the sources to build the component from (see wasm_sandbox/_build.py).
"""
