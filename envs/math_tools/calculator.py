"""A safe calculator: arithmetic expressions evaluated exactly with sympy, never with ``eval``.

Holds :func:`evaluate` (expression text to an exact sympy number),
:func:`decimal` (its digits, or an error when they cannot be had),
:func:`format_number` and :func:`parse_answer` (a final answer such as
``"$12.50"``, ``"7/3"`` or ``"x = 4"`` to a number). The expression is parsed
with :mod:`ast` and only a whitelist of nodes is walked: numbers, ``+ - * /
// % **`` (``^`` means power), parentheses, ``pi``/``e`` and a few functions.
Decimal literals become exact rationals (``0.1`` is ``1/10``). Sizes are
capped so ``9**9**9`` or ``factorial(10**6)`` is refused, not computed.
"""

from __future__ import annotations

import ast
import re

import sympy

__all__ = ["CalculatorError", "evaluate", "decimal", "format_number", "parse_answer", "numbers_in"]

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000
MAX_DIGITS = 2000
# working precision of :func:`decimal`: ``(pi * 10**999) % 7`` needs ~1000 digits before its first correct one
WORKING_DIGITS = MAX_DIGITS + 100

_FUNCTIONS = {
    "sqrt": sympy.sqrt,
    "abs": sympy.Abs,
    "floor": sympy.floor,
    "ceil": sympy.ceiling,
    "exp": sympy.exp,
    "log": sympy.log,
    "ln": sympy.log,
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "factorial": sympy.factorial,
    "gcd": sympy.gcd,
    "lcm": sympy.lcm,
    "min": sympy.Min,
    "max": sympy.Max,
    "round": lambda x, n=0: _round(x, n),
}
_CONSTANTS = {"pi": sympy.pi, "e": sympy.E}
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?")


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be computed; the message says why."""


def evaluate(expression: str) -> sympy.Expr:
    """Evaluate an arithmetic expression exactly.

    Raises:
        CalculatorError: syntax outside the whitelist, division by zero, numbers too large.

    Example:
        >>> evaluate("3 * (4 + 0.5)"), evaluate("2^10"), evaluate("sqrt(8)")
        (27/2, 1024, 2*sqrt(2))
        >>> try:
        ...     evaluate("__import__('os').system('ls')")
        ... except CalculatorError as err:
        ...     print(err)
        Call is not allowed in a calculator expression
    """
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("give an arithmetic expression, e.g. '3 * (4 + 5)'")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression too long ({len(expression)} characters, limit {MAX_EXPRESSION_CHARS})")
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise CalculatorError(f"not a valid expression: {err.msg}") from None
    value = _walk(tree.body)
    if value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise CalculatorError("the result is undefined (division by zero?)")
    return value


def _walk(node: ast.AST) -> sympy.Expr:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        if isinstance(node.value, int) and len(str(abs(node.value))) > MAX_DIGITS:
            raise CalculatorError("number too large")
        return sympy.Rational(repr(node.value)) if isinstance(node.value, float) else sympy.Integer(node.value)
    if isinstance(node, ast.Name):
        if node.id not in _CONSTANTS:
            raise CalculatorError(f"names allowed: {', '.join(sorted(_CONSTANTS))}; got {node.id[:30]!r}")
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _walk(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _walk(node.left), _walk(node.right)
        op = node.op
        if isinstance(op, ast.Add):
            return _checked(left + right)
        if isinstance(op, ast.Sub):
            return _checked(left - right)
        if isinstance(op, ast.Mult):
            return _checked(left * right)
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if right == 0:
                raise CalculatorError("division by zero")
            if isinstance(op, ast.Div):
                return _checked(left / right)
            try:
                return _checked(sympy.floor(left / right) if isinstance(op, ast.FloorDiv) else sympy.Mod(left, right))
            except (TypeError, ValueError, ArithmeticError) as err:  # sympy's own OverflowError, PrecisionExhausted
                raise CalculatorError(f"cannot compute {type(op).__name__}: {err}") from None
        if isinstance(op, ast.Pow):
            if not right.is_number or abs(sympy.N(right)) > MAX_EXPONENT:
                raise CalculatorError(f"exponent too large (limit {MAX_EXPONENT})")
            if left == 0 and sympy.N(right).is_extended_negative:  # a complex exponent has no sign
                raise CalculatorError("division by zero")
            return _checked(left**right)
        raise CalculatorError(f"operator {type(op).__name__} is not allowed; use + - * / // % ** and parentheses")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        name = node.func.id
        if name not in _FUNCTIONS:
            raise CalculatorError(f"unknown function {name[:30]!r}; allowed: {', '.join(sorted(_FUNCTIONS))}")
        args = [_walk(arg) for arg in node.args]
        if name == "factorial" and (len(args) != 1 or not args[0].is_integer or args[0] > 1000 or args[0] < 0):
            raise CalculatorError("factorial takes one integer from 0 to 1000")
        try:
            return _checked(_FUNCTIONS[name](*args))
        except (TypeError, ValueError, ArithmeticError) as err:  # ArithmeticError: sympy's PrecisionExhausted
            raise CalculatorError(f"{name}: {err}") from None
    raise CalculatorError(f"{type(node).__name__} is not allowed in a calculator expression")


_ZERO = sympy.Integer(0)


def _round(x: sympy.Expr, n: sympy.Expr = _ZERO) -> sympy.Expr:
    digits = int(n)
    if abs(digits) > MAX_DIGITS:  # 10**digits itself would not fit
        raise CalculatorError(f"round takes at most {MAX_DIGITS} digits")
    return sympy.Rational(round(sympy.Rational(x) * 10**digits)) / 10**digits


def _checked(value: sympy.Expr) -> sympy.Expr:
    if value.is_Integer and abs(value) > 10**MAX_DIGITS:
        raise CalculatorError("number too large")
    if value.is_Rational and (abs(value.p) > 10**MAX_DIGITS or value.q > 10**MAX_DIGITS):
        raise CalculatorError("number too large")
    if not value.is_Rational and not value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        # a symbolic value (exp(...), pi**k) is capped by size too: sin, floor or a decimal of exp(9**99)
        # need its 10**94 digits and never finish. Every operand passed this check, so N() here is quick.
        try:
            magnitude = abs(sympy.N(value, 15))
        except (TypeError, ValueError, ArithmeticError) as err:
            raise CalculatorError(f"cannot evaluate: {str(err) or type(err).__name__}") from None
        if magnitude.is_number and magnitude > 10**MAX_DIGITS:
            raise CalculatorError("number too large")
    return value


def decimal(value: sympy.Expr, digits: int = 15, working_digits: int = WORKING_DIGITS) -> sympy.Expr:
    """``value`` as a decimal with ``digits`` correct significant digits (complex values stay complex).

    The working precision grows up to ``working_digits`` digits, which bounds the time (about a second at
    most for a 500-character expression whose terms cancel).

    Raises:
        CalculatorError: the digits cannot be had at that precision ("precision lost"), e.g. for an
            expression whose terms cancel to 0 but that sympy does not reduce.

    Example:
        >>> decimal(evaluate("(pi * 10**999) % 7"))
        5.93809525720107
        >>> try:
        ...     decimal(evaluate("(1 + sqrt(2)) * (sqrt(2) - 1) - 1"))
        ... except CalculatorError as err:
        ...     print(err)
        precision lost: 15 correct digits of -1 + (-1 + sqrt(2))*(1 + sqrt(2)) cannot be computed
    """
    try:
        return sympy.N(value, digits, strict=True, maxn=working_digits)
    except (TypeError, ValueError, ArithmeticError):  # ArithmeticError: sympy's PrecisionExhausted
        shown = str(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise CalculatorError(f"precision lost: {digits} correct digits of {shown} cannot be computed") from None


def format_number(value: sympy.Expr) -> str:
    """Exact form plus a decimal when they differ; a note instead of the decimal when its digits cannot be computed.

    Example:
        >>> format_number(sympy.Rational(7, 4)), format_number(sympy.Integer(12)), format_number(sympy.sqrt(2))
        ('7/4 = 1.75', '12', 'sqrt(2) = 1.41421356237310')
        >>> format_number(evaluate("(1 + sqrt(2)) * (sqrt(2) - 1) - 1"))
        '-1 + (-1 + sqrt(2))*(1 + sqrt(2)) (no decimal: precision lost; simplify the expression by hand)'
    """
    if value.is_Integer:
        return str(value)
    try:
        digits = decimal(value)
    except CalculatorError:
        return f"{value} (no decimal: precision lost; simplify the expression by hand)"
    text = str(digits).rstrip("0").rstrip(".") if value.is_Rational and "." in str(digits) else str(digits)
    return f"{value} = {text}"


def numbers_in(text: str) -> list[sympy.Rational]:
    """Every number written in ``text`` (``12``, ``-3.5``, ``1,200``, ``7/4``), as exact rationals, in order."""
    values = []
    for token in _NUMBER.findall(text):
        try:
            values.append(evaluate(token.replace(",", "")))
        except CalculatorError:
            continue
    return values


def parse_answer(text: str) -> sympy.Expr | None:
    """A final answer as a number: the whole text if it is an expression, else the last number in it.

    Example:
        >>> parse_answer("$1,250.50"), parse_answer("x = 7/3"), parse_answer("about 12 km"), parse_answer("none")
        (2501/2, 7/3, 12, None)
    """
    cleaned = text.strip().replace("$", "").replace("€", "").rstrip(".")
    try:
        return evaluate(cleaned.replace(",", "")) if cleaned else None
    except CalculatorError:
        found = numbers_in(cleaned)
        return found[-1] if found else None
