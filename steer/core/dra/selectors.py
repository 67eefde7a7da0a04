"""DeviceClass selectors: CEL over one device, evaluated the way the scheduler's DRA allocator
evaluates them, in pure Python (cel-python, module `celpy`).

The environment follows upstream's (kubernetes `staging/src/k8s.io/dynamic-resource-allocation/
cel/compile.go`, `DeviceMatches`):

- `device.driver`: the driver name (string);
- `device.attributes[<domain>].<name>`: string, int, bool, or a semantic version for a
  `version` attribute; an attribute name without a domain belongs to the driver's domain
  (`parseQualifiedName`);
- `device.capacity[<domain>].<name>`: a quantity;
- `device.allowMultipleAllocations`: bool, false when the device does not say (`ptr.Deref`);
- an unknown domain reads as an empty map (`newStringInterfaceMapWithDefault`), so
  `"x" in device.attributes["other.com"]` is false, not an error; an unknown name in a known
  domain is an error, as upstream.

Of the Kubernetes CEL libraries the DRA environment carries, the quantity and semver functions
are here (`k8s.io/apiserver/pkg/cel/library/quantity.go`, `semverlib.go`): `quantity()`,
`isQuantity()`, `compareTo`, `isGreaterThan`, `isLessThan`, `asInteger`, `asApproximateFloat`,
`sign`, `isInteger`, `add`, `sub`; `semver()`, `isSemver()`, `major`, `minor`, `patch`.
Not here: `cel.bind` (a macro celpy does not know), list-typed attributes (alpha in 1.36) and
upstream's cost limit. A selector that uses them "cannot evaluate", which is reported, never
taken as a match.

cel-python's behaviour this relies on (method calls dispatch to a function of that name with the
receiver first; a Python exception in a function becomes an error value; `&&`/`||` absorb an
error the other side decides) is pinned by tests/test_dra_inventory.py, and its version is
bounded in pyproject.toml.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError

from steer.core.quantity import parse_quantity

# -- values ------------------------------------------------------------------------------------

_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    """A semantic version (semver.org 2.0, as `github.com/blang/semver/v4` parses it for
    upstream). Equal by precedence (build metadata does not count). No `<` or `>`: upstream's
    CEL type has none either, a selector orders versions with `compareTo` and friends."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: str = ""

    @classmethod
    def parse(cls, text: str) -> Semver:
        match = _SEMVER_RE.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH, e.g. 1.2.3)")
        pre = tuple(
            int(part) if part.isdigit() else part for part in (match[4] or "").split(".") if part
        )
        return cls(int(match[1]), int(match[2]), int(match[3]), pre, match[5] or "")

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        # A release ranks above its pre-releases; numeric identifiers rank below alphanumeric.
        pre = tuple((0, p) if isinstance(p, int) else (1, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self._key() == other._key()

    def compare(self, other: Semver) -> int:
        a, b = self._key(), other._key()
        return (a > b) - (a < b)

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(map(str, self.pre))
        return text + (f"+{self.build}" if self.build else "")


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """A Kubernetes quantity inside CEL: equal when the amounts are ("1Gi" == "1024Mi")."""

    value: Fraction

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return str(self.value)


# An attribute's value as a selector sees it (and as kube-steer keeps it).
AttributeValue = str | int | bool | Semver

# -- the Kubernetes library functions ----------------------------------------------------------

_INT64 = 2**63


def _no_overload(name: str, *args: object) -> TypeError:
    kinds = ", ".join(type(a).__name__ for a in args)
    return TypeError(f"no such overload: {name}({kinds})")


def _compare(name: str, left: object, right: object) -> int:
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        return (left.value > right.value) - (left.value < right.value)
    if isinstance(left, Semver) and isinstance(right, Semver):
        return left.compare(right)
    raise _no_overload(name, left, right)


def _quantity(text: object) -> Quantity:
    if not isinstance(text, str):
        raise _no_overload("quantity", text)
    return Quantity(parse_quantity(str(text)))  # QuantityError is a ValueError: an error value


def _is_quantity(text: object) -> celtypes.BoolType:
    try:
        _quantity(text)
    except (TypeError, ValueError):
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _as_integer(q: object) -> celtypes.IntType:
    if not isinstance(q, Quantity):
        raise _no_overload("asInteger", q)
    if q.value.denominator != 1 or not -_INT64 <= q.value.numerator < _INT64:
        raise ValueError(f"cannot convert quantity {q.value} to an int64")
    return celtypes.IntType(q.value.numerator)


def _quantity_method(name: str, fn: Callable[[Fraction], Any]) -> Callable[[object], Any]:
    def method(q: object) -> Any:
        if not isinstance(q, Quantity):
            raise _no_overload(name, q)
        return fn(q.value)

    return method


def _quantity_arithmetic(name: str, sign: int) -> Callable[[object, object], Quantity]:
    def method(q: object, other: object) -> Quantity:
        if isinstance(q, Quantity) and isinstance(other, Quantity):
            return Quantity(q.value + sign * other.value)
        if isinstance(q, Quantity) and isinstance(other, int) and not isinstance(other, bool):
            return Quantity(q.value + sign * int(other))
        raise _no_overload(name, q, other)

    return method


def _semver(text: object, normalize: object = False) -> Semver:
    if not isinstance(text, str):
        raise _no_overload("semver", text)
    value = str(text)
    if normalize:  # semver(s, true): "v1.2" reads as 1.2.0 (library/semverlib.go)
        match = re.match(r"^v?([0-9]+(?:\.[0-9]+){0,2})(.*)$", value)
        if match is not None:
            parts = [str(int(p)) for p in match[1].split(".")]  # no leading zeros
            value = ".".join([*parts, "0", "0"][:3]) + match[2]
    return Semver.parse(value)


def _is_semver(text: object, normalize: object = False) -> celtypes.BoolType:
    try:
        _semver(text, normalize)
    except (TypeError, ValueError):
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _semver_part(name: str) -> Callable[[object], celtypes.IntType]:
    def method(v: object) -> celtypes.IntType:
        if not isinstance(v, Semver):
            raise _no_overload(name, v)
        return celtypes.IntType(getattr(v, name))

    return method


# celpy dispatches `x.f(y)` to `f(x, y)`: one function per name serves both types.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": lambda a, b: celtypes.IntType(_compare("compareTo", a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare("isGreaterThan", a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare("isLessThan", a, b) < 0),
    "asInteger": _as_integer,
    "asApproximateFloat": _quantity_method("asApproximateFloat", lambda v: celtypes.DoubleType(v)),
    "sign": _quantity_method("sign", lambda v: celtypes.IntType((v > 0) - (v < 0))),
    "isInteger": _quantity_method(
        "isInteger", lambda v: celtypes.BoolType(v.denominator == 1 and abs(v) < _INT64)
    ),
    "add": _quantity_arithmetic("add", 1),
    "sub": _quantity_arithmetic("sub", -1),
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _semver_part("major"),
    "minor": _semver_part("minor"),
    "patch": _semver_part("patch"),
}

# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SelectorResult:
    """Whether a selector selects a device. `error` ("cannot evaluate: <reason>") when it could
    not be told; `selected` is then False, and the caller reports the error."""

    selected: bool
    error: str | None = None


SELECTED = SelectorResult(True)
NOT_SELECTED = SelectorResult(False)


def cannot_evaluate(reason: str) -> SelectorResult:
    return SelectorResult(False, f"cannot evaluate: {reason}")


# -- what an expression can read, for memoisation ----------------------------------------------

_LITERAL = r"""(?:"[^"\\]*"|'[^'\\]*')"""
_MAP = r"\bdevice\s*\.\s*(?:attributes|capacity)\s*\[\s*" + _LITERAL + r"\s*\]"
# The only ways a selector may read the device for names it does not spell out to be ruled out:
# a named member of a domain map, or a literal key tested with `in`.
_NAMED_READ = re.compile(
    _MAP + r"\s*(?:\.\s*[A-Za-z_]\w*|\[\s*" + _LITERAL + r"\s*\])"
    r"|" + _LITERAL + r"\s+in\s+" + _MAP
)
_DEVICE_FIELD = re.compile(r"\bdevice\s*\.\s*(?:driver|allowMultipleAllocations)\b")
_DEVICE = re.compile(r"\bdevice\b")
_ENUMERATES = re.compile(r"\b(?:all|exists|exists_one|map|filter|size|string|dyn)\s*\(")


def _reads_named_members_only(expression: str) -> bool:
    """Whether every read of the device in `expression` names what it reads: then an attribute
    whose name does not occur in the text cannot change the result. Anything else (a macro over
    a map, `size()`, a whole map compared, a computed key) reads every attribute."""
    if _ENUMERATES.search(expression):
        return False
    rest = _DEVICE_FIELD.sub(" ", _NAMED_READ.sub(" ", expression))
    return _DEVICE.search(rest) is None


def _split_name(qualified: str) -> tuple[str, str]:
    domain, sep, name = qualified.partition("/")
    return (domain, name) if sep else ("", domain)


# -- evaluation --------------------------------------------------------------------------------


class _DomainMap(celtypes.MapType):
    """`device.attributes` / `device.capacity`: an unknown domain is an empty map (upstream's
    `newStringInterfaceMapWithDefault`)."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


def _cel_attribute(value: AttributeValue) -> Any:
    if isinstance(value, bool):  # before int: a bool is an int in Python
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    return value  # Semver


def _domains(entries: Mapping[str, Any], driver: str, convert: Callable[[Any], Any]) -> _DomainMap:
    out: dict[Any, Any] = {}
    for qualified, value in entries.items():
        domain, name = _split_name(qualified)
        inner = out.setdefault(celtypes.StringType(domain or driver), celtypes.MapType())
        inner[celtypes.StringType(name)] = convert(value)
    return _DomainMap(out)


# celpy's words for an exception raised in a function: the exception says more.
_GENERIC = frozenset({"return error for overflow", "no such overload"})


def _reason(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else type(exc).__name__
    cause = exc.__cause__
    if text in _GENERIC and cause is not None and cause.args:
        text = str(cause.args[0])
    text = text.split(" (in activation", 1)[0]  # celpy appends the whole activation
    return text if len(text) <= 200 else text[:197] + "..."


@dataclass(frozen=True, slots=True)
class _Compiled:
    expression: str
    program: celpy.Runner | None
    error: str | None
    named_only: bool
    # qualified name -> whether its name occurs in the text (filled as names are seen)
    mentions: dict[str, bool] = field(default_factory=dict)

    def reads(self, pair: tuple[str, object]) -> bool:
        known = self.mentions.get(pair[0])
        if known is None:
            known = self.mentions[pair[0]] = _split_name(pair[0])[1] in self.expression
        return known


class DeviceSelectors:
    """Evaluates selectors on devices: each expression compiled once, each result memoised by
    what the expression can read of a device (its driver, and the attributes and capacities
    whose names occur in the text), so the thousand identical GPUs of a cluster evaluate once.
    Not thread-safe: one builder uses it at a time."""

    def __init__(self, *, max_memo: int = 200_000) -> None:
        self._env = celpy.Environment()
        self._compiled: dict[str, _Compiled] = {}
        self._memo: dict[tuple[Any, ...], SelectorResult] = {}
        self.max_memo = max_memo
        self.compilations = 0
        self.evaluations = 0  # celpy runs, i.e. memo misses

    def compile_error(self, expression: str) -> str | None:
        """Why `expression` does not compile ("cannot evaluate: ..."), or None."""
        return self._compile(expression).error

    def _compile(self, expression: str) -> _Compiled:
        compiled = self._compiled.get(expression)
        if compiled is None:
            self.compilations += 1
            try:
                program = self._env.program(self._env.compile(expression), functions=FUNCTIONS)
                compiled = _Compiled(
                    expression, program, None, _reads_named_members_only(expression)
                )
            except Exception as exc:  # a parse error: CELParseError, or lark's own
                where = getattr(exc, "column", None)
                at = f" at column {where}" if where else ""
                compiled = _Compiled(expression, None, f"cannot evaluate: syntax error{at}", True)
            self._compiled[expression] = compiled
        return compiled

    def evaluate(
        self,
        expression: str,
        *,
        driver: str,
        attributes: Mapping[str, AttributeValue],
        capacity: Mapping[str, Fraction],
        allow_multiple_allocations: bool = False,
    ) -> SelectorResult:
        """Whether `expression` selects the device. Attribute and capacity names are qualified
        (`<domain>/<name>`; unqualified ones belong to `driver`). Never raises."""
        compiled = self._compile(expression)
        if compiled.program is None:
            return SelectorResult(False, compiled.error)
        # Types in the key: True == 1, and `== true` must not answer for an int attribute.
        if compiled.named_only:
            reads = compiled.reads
            read = tuple(filter(reads, attributes.items()))
            key: tuple[Any, ...] = (
                expression,
                driver,
                allow_multiple_allocations if "allowMultipleAllocations" in expression else None,
                read,
                tuple(v.__class__ for _, v in read),
                tuple(filter(reads, capacity.items())),
            )
        else:
            read = tuple(attributes.items())
            key = (
                expression,
                driver,
                allow_multiple_allocations,
                read,
                tuple(v.__class__ for _, v in read),
                tuple(capacity.items()),
            )
        result = self._memo.get(key)
        if result is None:
            result = self._run(
                compiled.program, driver, attributes, capacity, allow_multiple_allocations
            )
            if len(self._memo) >= self.max_memo:
                self._memo.clear()  # bounded; a rebuild refills what is still in use
            self._memo[key] = result
        return result

    def _run(
        self,
        program: celpy.Runner,
        driver: str,
        attributes: Mapping[str, AttributeValue],
        capacity: Mapping[str, Fraction],
        allow_multiple_allocations: bool,
    ) -> SelectorResult:
        self.evaluations += 1
        device = celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(driver),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    allow_multiple_allocations
                ),
                celtypes.StringType("attributes"): _domains(attributes, driver, _cel_attribute),
                celtypes.StringType("capacity"): _domains(capacity, driver, Quantity),
            }
        )
        try:
            value = program.evaluate({"device": device})
        except Exception as exc:  # celpy raises its error values at the top level
            return cannot_evaluate(_reason(exc))
        if isinstance(value, CELEvalError):
            return cannot_evaluate(_reason(value))
        if not isinstance(value, celtypes.BoolType):
            return cannot_evaluate(f"the selector gives {type(value).__name__}, not a bool")
        return SELECTED if value else NOT_SELECTED
