"""A plan's content text: canonical text that another process turns back into the equal `Plan`.

The text is what the docs and jarp's error messages call the plan's *description*: the ``desc`` attribute of each
compiled jarp call.

A compiled program that outlives its process (JAX's persistent compilation cache, ``jax.export``) cannot carry
a process-local plan handle; its custom call carries `content_text`'s text instead, and the process that loads it
calls `rebuild`. The text holds nothing process-local: two processes that trace the same function write the
same text. It names the plan's target by content:

- a kernel by its Warp module and key (for an overload of a generic kernel, also its argument types), its
  code hash (Warp's per-kernel content hash: source, argument types, constants, the ``wp.func`` it calls) and
  the recipe of jarp's derived kernel it runs (the runtime-value names of `_runtime_scalars.variant`, and
  whether it is the `_runtime_scalars.bounds_checked` build), not the derived kernel itself;
- a ``jax_callable`` function by its Python module, ``__qualname__`` and a hash of its code object;

and holds every other field of the plan (bindings with exact static values, buffers, aliases, batching,
options). The argument specs are not in it: `rebuild` derives them again from the target's parameters.

`rebuild` treats its text as untrusted (a loaded program may be crafted): it checks the type and range of
every field, never imports a module, evaluates or unpickles anything, and finds targets only among those this
process has defined (Warp's module registry; ``sys.modules`` and an attribute walk). It then runs the checks
`_builder.build_plan` runs, and checks every buffer a binding names against its parameter, so a crafted text
cannot make a launch read or write outside its buffers. Every failure is a `ContentError`.

The package: `_encode` writes the text, `_targets` names a target by content and finds it in this process,
`_fields` reads the untrusted fields, `_decode` turns them into a plan, `_recheck` checks that plan as
`_builder.build_plan` checks its own.

Example:
    ```python
    text = content_text(plan)  # '{"abi":1,"adjoint":false,...}'
    assert rebuild(text) == plan
    ```
"""

from ._decode import LocalName as LocalName
from ._decode import read_text as read_text
from ._decode import rebuild as rebuild
from ._encode import content_text as content_text
from ._encode import local_text as local_text
from ._encode import not_portable as not_portable
from ._fields import ABI_VERSION as ABI_VERSION
from ._fields import MAX_TEXT as MAX_TEXT
from ._fields import ContentError as ContentError
from ._targets import code_hash as code_hash
