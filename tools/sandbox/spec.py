"""The launcher spec's shape, for the type checker: what launch_spec.py builds on the host and
launch.py and confine.py (or the compiled helper) read back after marshal.

Types only. The launcher imports nothing it does not need (launch.py says why), so its
modules name these in string annotations under an `if TYPE_CHECKING:` of their own; the
values themselves are plain dicts, tuples and lists, which is all marshal carries.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict

# (resource, soft limit, what the hard limit adds): rlimits.pairs
RlimitPair: TypeAlias = tuple[int, int, int]

# Landlock rule operations (landlock_rules.ruleset):
# ("allow", path, rights): `rights` on path;
AllowOp: TypeAlias = tuple[Literal["allow"], str, int]
# ("except", root, rights, excluded, dir_rights): rights beneath root but beneath no excluded
# path; ("children", ...): the same on each entry of root, root itself getting nothing;
ExceptOp: TypeAlias = tuple[Literal["except", "children"], str, int, list[str], int]
# ("port", port, rights): TCP rights on one port (allow-list mode: the forwarder's).
PortOp: TypeAlias = tuple[Literal["port"], int, int]
LandlockOp: TypeAlias = AllowOp | ExceptOp | PortOp


class LandlockRuleset(TypedDict):
    fs: int  # the handled file-system rights
    net: int  # the handled network rights (0: none)
    scoped: int  # the scopes (abstract unix sockets, signals; 0: none)
    attr_size: int  # sizeof the ruleset attribute this ABI takes
    ops: list[LandlockOp]


class Confinement(TypedDict):
    """launch_spec.confinement: each layer's entry, None where the layer is off."""

    rlimits: list[RlimitPair] | None
    landlock: LandlockRuleset | None
    seccomp: bytes | None  # the BPF program
    privileges: tuple[int, int, int] | None  # capset's syscall number, last cap, securebits


class LaunchSpec(Confinement):
    """The whole spec runner.launch_argv hands the launcher."""

    tree_kill: bool
    agent_pid: int | None  # None: bubblewrap's --die-with-parent watches the agent
    nproc_watch: int  # the launcher counts processes (0: it does not)
    status_fd: NotRequired[int]  # the host's pipe: "R" once confined
    forward: NotRequired[tuple[int, str]]  # allow-list mode: (port, proxy socket path)
