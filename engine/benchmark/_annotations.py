"""Annotations a literal can satisfy: a harvested function's parameter and return
annotations read (never evaluated) into *type specs*, and a model's literal arguments
checked against them before anything runs.

A spec is a small tuple, hashable and JSON-able, so a :class:`Harvested` function carries
the specs of its parameters and the check needs nothing of its module again:

* ``("any",)``: ``Any``, ``object`` (as a parameter), an unbound type variable;
* ``("atom", name)``: ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``bool``,
  ``none`` (PEP 484's numeric tower: an ``int`` is a ``float``, a ``bool`` an ``int``);
* ``("literal", values)``: ``Literal[...]``;
* ``("items", kind, element)``: a container of one element type; ``kind`` says which
  literals are one (:data:`ITEM_KINDS`: ``Iterable[_T]`` takes a list, a tuple, a set, a
  dict (its keys), a str or bytes; ``Sequence`` a list, a tuple, a str or bytes);
* ``("tuple", elements)``: ``tuple[int, str]``;
* ``("map", kind, key, value)``: ``dict``, ``Mapping``, ``MutableMapping`` (a dict);
* ``("union", members)``: ``Optional``, ``Union``, ``X | Y``, a constrained type variable.

A *parameter* needs one literal to satisfy it: a union keeps the members a literal can
satisfy (``Union[str, Pattern]`` takes a str), a type variable is its bound or the union
of its constraints (``TypeVar("T", str, bytes)``), unbound it is ``Any`` (type variables
are not solved across parameters). A *return* must be written as a literal whatever the
function returns: every member of a union must be literal-able, and ``object`` is not
(``Any`` is: the annotation that says "data" in most packages). What is rejected says why
in one of :data:`ANNOTATION_REASONS` (counted in ``harvest.json``'s
``rejected_annotations``).
"""

from __future__ import annotations

import ast
from typing import Callable

Spec = tuple

ATOMS = {"int": "int", "float": "float", "complex": "complex", "str": "str", "bool": "bool",
         "bytes": "bytes", "None": "none", "NoneType": "none", "types.NoneType": "none",
         "typing.Text": "str", "typing.SupportsInt": "int", "typing.SupportsIndex": "int",
         "typing.SupportsFloat": "float", "typing.SupportsComplex": "complex",
         "typing.SupportsAbs": "float", "typing.SupportsRound": "float",
         "numbers.Number": "complex", "numbers.Complex": "complex", "numbers.Real": "float",
         "numbers.Rational": "int", "numbers.Integral": "int"}
# which literal containers are a kind of container: (list, tuple, set, frozenset, dict, str, bytes)
ITEM_KINDS = {
    "list": {list}, "typing.List": {list}, "tuple": {tuple}, "typing.Tuple": {tuple},
    "set": {set}, "typing.Set": {set}, "frozenset": {frozenset}, "typing.FrozenSet": {frozenset},
    "typing.MutableSequence": {list}, "typing.MutableSet": {set},
    "typing.AbstractSet": {set, frozenset},
    "typing.Sequence": {list, tuple, str, bytes},
    "typing.Iterable": {list, tuple, set, frozenset, dict, str, bytes},
    "typing.Collection": {list, tuple, set, frozenset, dict, str, bytes},
    "typing.Container": {list, tuple, set, frozenset, dict, str, bytes},
    "typing.Reversible": {list, tuple, dict, str, bytes},
    "typing.Sized": {list, tuple, set, frozenset, dict, str, bytes},
}
MAPS = {"dict": "dict", "typing.Dict": "dict", "typing.Mapping": "dict",
        "typing.MutableMapping": "dict"}
ANY = frozenset({"typing.Any"})
OBJECT = "object"
UNIONS = frozenset({"typing.Optional", "typing.Union"})
LITERALS = frozenset({"typing.Literal"})
ANNOTATED = frozenset({"typing.Annotated"})
TYPEVARS = frozenset({"typing.TypeVar"})
NEWTYPES = frozenset({"typing.NewType"})
CALLABLES = frozenset({"typing.Callable"})
ITERATORS = frozenset({"typing.Iterator", "typing.Generator", "typing.AsyncIterator",
                       "typing.AsyncGenerator", "typing.AsyncIterable", "typing.Awaitable",
                       "typing.Coroutine"})

# Why an annotation is not literal-able (harvest.json's "rejected_annotations").
A_CLASS = "a class"                       # a class of the package or of another library
A_CALLABLE = "a callable"
AN_ITERATOR = "an iterator or generator"
A_TYPEVAR = "a type variable no literal satisfies"
OBJECT_RETURN = "object as the return"
A_UNION = "a union with a member no literal satisfies (return)"
OTHER_TYPING = "another typing construct"  # Type[...], Pattern, IO, Protocol, ...
UNPARSED = "a string annotation that does not parse"
ANNOTATION_REASONS = (A_CLASS, A_CALLABLE, AN_ITERATOR, A_TYPEVAR, OBJECT_RETURN, A_UNION,
                      OTHER_TYPING, UNPARSED)
_MAX_DEPTH = 20


class NotLiteral(Exception):
    """An annotation no literal satisfies: ``reason`` is one of ANNOTATION_REASONS."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def canonical(name: str | None) -> str | None:
    """``typing_extensions.X`` and ``collections.abc.X`` as ``typing.X``: one spelling."""
    if name is None:
        return None
    if name in ("collections.abc.Set", "_collections_abc.Set"):
        return "typing.AbstractSet"  # typing.Set is the builtin set
    for prefix in ("typing_extensions.", "collections.abc.", "_collections_abc."):
        if name.startswith(prefix):
            return "typing." + name[len(prefix):]
    return name


def spec_of(node: ast.expr, origin: Callable[[ast.expr], str | None],
            aliases: dict[str, ast.expr], returns: bool = False) -> Spec:
    """The spec of an annotation (a parameter's, or the return's with ``returns``), read
    with ``origin`` (a dotted name as its module sees it, None for a name the module
    binds itself) and ``aliases`` (the module's simple assignments); NotLiteral if no
    literal can satisfy it."""
    return _Reader(origin, aliases, returns).read(node, 0)


class _Reader:
    def __init__(self, origin, aliases, returns: bool) -> None:
        self.origin = lambda node: canonical(origin(node))
        self.aliases = aliases
        self.returns = returns

    def read(self, node: ast.expr | None, depth: int) -> Spec:
        if node is None or depth > _MAX_DEPTH:
            raise NotLiteral(OTHER_TYPING)
        if isinstance(node, ast.Constant):
            if node.value is None:
                return ("atom", "none")
            if isinstance(node.value, str):  # a string annotation: parsed, never evaluated
                try:
                    parsed = ast.parse(node.value.strip(), mode="eval").body
                except (SyntaxError, ValueError, MemoryError, RecursionError):
                    raise NotLiteral(UNPARSED) from None
                return self.read(parsed, depth + 1)
            raise NotLiteral(OTHER_TYPING)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._union([node.left, node.right], depth)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, depth)
        name = self.origin(node)
        if name in ANY:
            return ("any",)
        if name == OBJECT:
            if self.returns and depth == 0:
                raise NotLiteral(OBJECT_RETURN)
            return ("any",)
        if name in ATOMS:
            return ("atom", ATOMS[name])
        if name in ITEM_KINDS:
            return ("items", _kind(name), ("any",))
        if name in MAPS:
            return ("map", "dict", ("any",), ("any",))
        if name == "typing.AnyStr":
            return ("union", (("atom", "str"), ("atom", "bytes")))
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return self._alias(self.aliases[node.id], depth)
        raise NotLiteral(self._why(name))

    def _why(self, name: str | None) -> str:
        if name in CALLABLES:
            return A_CALLABLE
        if name in ITERATORS:
            return AN_ITERATOR
        if name is not None and name.startswith("typing."):
            return OTHER_TYPING
        return A_CLASS

    def _alias(self, value: ast.expr, depth: int) -> Spec:
        """A module-level assignment: a type alias, a TypeVar, a NewType."""
        if isinstance(value, ast.Call):
            # by its spelling too: an alias imported from another module of the package
            # is read with this module's names, where TypeVar may not be imported
            called = self.origin(value.func) or ""
            if called in TYPEVARS or called.rsplit(".", 1)[-1] == "TypeVar":
                return self._typevar(value, depth)
            if ((called in NEWTYPES or called.rsplit(".", 1)[-1] == "NewType")
                    and len(value.args) == 2):
                return self.read(value.args[1], depth + 1)
            raise NotLiteral(A_CLASS)
        return self.read(value, depth + 1)

    def _typevar(self, call: ast.Call, depth: int) -> Spec:
        constraints = call.args[1:]
        bound = next((k.value for k in call.keywords if k.arg == "bound"), None)
        if constraints:
            members = []
            for constraint in constraints:
                try:
                    members.append(self.read(constraint, depth + 1))
                except NotLiteral:
                    if self.returns:
                        raise NotLiteral(A_TYPEVAR) from None
            if not members:
                raise NotLiteral(A_TYPEVAR)
            return members[0] if len(members) == 1 else ("union", tuple(members))
        if bound is not None:
            try:
                return self.read(bound, depth + 1)
            except NotLiteral:
                raise NotLiteral(A_TYPEVAR) from None
        return ("any",)

    def _union(self, items: list[ast.expr], depth: int) -> Spec:
        members: list[Spec] = []
        first: NotLiteral | None = None
        for item in items:
            try:
                spec = self.read(item, depth + 1)
            except NotLiteral as exc:
                if self.returns:
                    raise NotLiteral(A_UNION if len(items) > 1 else exc.reason) from None
                first = first or exc
                continue
            for member in (spec[1] if spec[0] == "union" else (spec,)):
                if member not in members:
                    members.append(member)
        if not members:
            raise first or NotLiteral(OTHER_TYPING)
        return members[0] if len(members) == 1 else ("union", tuple(members))

    def _subscript(self, node: ast.Subscript, depth: int) -> Spec:
        base = self.origin(node.value)
        items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base in LITERALS:
            values = []
            for item in items:
                if not (isinstance(item, ast.Constant)
                        and isinstance(item.value, (int, str, bytes, bool, type(None)))):
                    raise NotLiteral(OTHER_TYPING)
                values.append(item.value)
            return ("literal", tuple(values))
        if base in ANNOTATED:
            return self.read(items[0], depth + 1)
        if base in UNIONS:
            if base == "typing.Optional":
                items = items + [ast.Constant(None)]
            return self._union(items, depth)
        if base in ("tuple", "typing.Tuple"):
            if len(items) == 2 and _is_ellipsis(items[1]):
                return ("items", "tuple", self.read(items[0], depth + 1))
            if len(items) == 1 and isinstance(items[0], ast.Tuple) and not items[0].elts:
                return ("tuple", ())  # tuple[()]
            return ("tuple", tuple(self.read(i, depth + 1) for i in items))
        if base in ITEM_KINDS:
            if len(items) != 1:
                raise NotLiteral(OTHER_TYPING)
            return ("items", _kind(base), self.read(items[0], depth + 1))
        if base in MAPS:
            if len(items) != 2:
                raise NotLiteral(OTHER_TYPING)
            return ("map", "dict", self.read(items[0], depth + 1),
                    self.read(items[1], depth + 1))
        raise NotLiteral(self._why(base))


def _is_ellipsis(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _kind(name: str) -> str:
    """The kind's name in a spec: ``list``, ``sequence``, ``iterable``, ..."""
    return name.removeprefix("typing.").lower()


_KIND_TYPES = {_kind(name): types for name, types in ITEM_KINDS.items()}
_MAX_CHECK_DEPTH = 100


def conforms(value: object, spec: Spec, depth: int = 0) -> bool:
    """Whether a literal ``value`` satisfies ``spec`` (exact container types: a literal
    is a list, tuple, set, frozenset, dict, str or bytes, never a subclass)."""
    if depth > _MAX_CHECK_DEPTH:
        return False
    tag = spec[0]
    if tag == "any":
        return True
    if tag == "atom":
        return _atom(value, spec[1])
    if tag == "literal":
        return any(type(value) is type(v) and value == v for v in spec[1])
    if tag == "union":
        return any(conforms(value, member, depth + 1) for member in spec[1])
    if tag == "tuple":
        return (type(value) is tuple and len(value) == len(spec[1])
                and all(conforms(v, s, depth + 1) for v, s in zip(value, spec[1])))
    if tag == "map":
        return type(value) is dict and all(
            conforms(k, spec[2], depth + 1) and conforms(v, spec[3], depth + 1)
            for k, v in value.items())
    if tag == "items":
        if type(value) not in _KIND_TYPES[spec[1]]:
            return False
        # a str's elements are str, bytes' are int, a dict's its keys
        return all(conforms(e, spec[2], depth + 1) for e in value)
    return False


def _atom(value: object, name: str) -> bool:
    kind = type(value)
    if name == "none":
        return value is None
    if name == "bool":
        return kind is bool
    if name == "int":
        return kind in (int, bool)
    if name == "float":
        return kind in (int, bool, float)
    if name == "complex":
        return kind in (int, bool, float, complex)
    return kind is {"str": str, "bytes": bytes}[name]


def describe(spec: Spec) -> str:
    """A spec as an annotation again, for messages: ``list[int] | None``."""
    tag = spec[0]
    if tag == "any":
        return "Any"
    if tag == "atom":
        return "None" if spec[1] == "none" else spec[1]
    if tag == "literal":
        return f"Literal[{', '.join(repr(v) for v in spec[1])}]"
    if tag == "union":
        return " | ".join(describe(m) for m in spec[1])
    if tag == "tuple":
        return f"tuple[{', '.join(describe(s) for s in spec[1]) or '()'}]"
    if tag == "map":
        return f"dict[{describe(spec[2])}, {describe(spec[3])}]"
    return f"{spec[1]}[{describe(spec[2])}]"
