"""Which names and which free-text shapes are secrets.

A name (header, query parameter, form field, JSON key, environment variable) is secret when one
of its words says so: key, token, secret, password, auth, session, signature, credential, cookie,
... Words come from splitting on punctuation and camelCase, so `x-goog-api-key`, `X-Auth-Token`,
`Private-Token`, `apiKey` and `pin_password` are secret, while `keyword`, `author` and
`max_tokens` are not. Some names look secret but carry figures the evaluator needs, and are
allowed: rate-limit headers, token usage counters (`*_tokens`, `token_count`), idempotency
keys (the idempotency check reads them) and MCP's `progressToken` (a client's name for one call,
which its progress notifications carry back: replay needs it to reach the client's callback).

A session's settings object is the exception to "secret-named masks everything": it is opened and
its own secret-named fields masked (`names_a_session`).

Shapes: well-known credential formats, caught in any text even when nobody configured them.
Assignments (`api_key=...`, `password: ...`) with a secret's name: looked for in text found
decoded inside an encoding (formats.encoded), which nothing else reads as a structure.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

# Whole words that make a name secret (plural forms included where they name secrets too).
_SECRET_WORDS = re.compile(
    r"keys?|apikeys?|token|secrets?|passw(?:or)?ds?|pwd|passphrase|pin|auth|oauth|authori[sz]ation"
    r"|authentication|sessions?|sessionid|sid|signatures?|sig|credentials?|cookies?|bearer|jwt|csrf|xsrf"
)
# Lower-case run-together words (`accesstoken`, `clientsecret`, `apikey`).
_SECRET_SUFFIXES = ("apikey", "accesskey", "privatekey", "secretkey", "token", "secret", "password", "passwd")
# A name with one of these words counts something ("token_count", "max_tokens", "token_limit").
_COUNTER_WORDS = frozenset({
    "tokens", "count", "counts", "usage", "used", "limit", "limits", "remaining", "reset", "budget", "max", "min",
    "total", "estimate", "estimated", "cost", "per", "rate", "ratelimit", "details",
})
_ALLOWED_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "ratelimit-", "x-rate-limit-")
_ALLOWED_NAMES = frozenset({"idempotency-key", "x-idempotency-key", "idempotency_key", "idempotencykey",
                            "progresstoken"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")

# Well-known credential shapes. The bearer form keeps its scheme word, the rest is masked whole.
SHAPES = re.compile(
    r"(?P<bearer>(?i:\bbearer)\s+)[A-Za-z0-9\-._~+/]{8,}=*"
    r"|\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"
    r"|\bAIza[0-9A-Za-z_-]{30,}"
    r"|\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
)

# `name=value` (up to a space or a separator) or `name: value` (to the end of the line) in free
# text: a config line, a log message, a command line.
# The value is read ahead, not consumed: `note: api_key=...` is two assignments.
_ASSIGNMENT = re.compile(r"(?<![\w.])(?P<name>[A-Za-z_][\w.-]{0,63})"
                         r"(?:[ \t]*=[ \t]*[\"']?(?=(?P<word>[^\s\"'&;,]+))|:[ \t]*[\"']?(?=(?P<line>[^\r\n\"']+)))")

# Lower-case substrings every shape contains: text without any skips the regex.
SHAPE_HINTS = ("bearer", "sk-", "aiza", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "akia", "asia")


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """True for a header, parameter, field or variable name that holds a secret (see above)."""
    lowered = name.lower()
    if lowered in _ALLOWED_NAMES or lowered.startswith(_ALLOWED_PREFIXES):
        return False
    words = [w.lower() for w in _WORD.findall(name)]
    secret = [w for w in words if _SECRET_WORDS.fullmatch(w) or w.endswith(_SECRET_SUFFIXES)]
    if not secret:
        return False
    if all(w == "token" for w in secret) and _COUNTER_WORDS.intersection(words):
        return False  # a usage figure: redacting it would break the token counts
    return True


@functools.lru_cache(maxsize=1024)
def names_a_session(name: str) -> bool:
    """True when "session" is the only secret word of the name (`session`, `sessionConfig`): a
    string there is a session id (a credential), but an object there is a session's settings
    (OpenAI Realtime's `session.update`), which redaction opens rather than masks whole."""
    words = [w.lower() for w in _WORD.findall(name)]
    secret = [w for w in words if _SECRET_WORDS.fullmatch(w) or w.endswith(_SECRET_SUFFIXES)]
    return bool(secret) and all(w in ("session", "sessions") for w in secret)


def secret_assignments(text: str, masked: str) -> Iterator[tuple[str, int, int]]:
    """(name, start, end of its value) for each assignment in free text whose name is a secret's
    and whose value is not already `masked` (the redactor's mark): where decoded text nobody
    parsed keeps a credential, e.g. `api_key=...` in a base64 field."""
    for match in _ASSIGNMENT.finditer(text):
        group = "word" if match.group("word") is not None else "line"
        value = match.group(group).rstrip()
        if value and set(value.split()) != {masked} and is_secret_name(match.group("name")):
            yield match.group("name"), match.start(group), match.start(group) + len(value)
