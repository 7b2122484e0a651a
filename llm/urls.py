"""The one check of a server URL that the HTTP backends (Ollama, OpenAI-compatible) share."""

from __future__ import annotations

import urllib.parse

__all__ = ["check_http_url"]


def check_http_url(value: str, setting: str, example: str,
                   default_scheme: str | None = None) -> urllib.parse.SplitResult:
    """``value`` split into its parts when it is ``http[s]://host[:port][/path]`` with a port
    from 1 to 65535 (``default_scheme`` stands in for a missing scheme; None: one is needed),
    else ValueError naming ``setting``, the value and ``example``."""
    expected = f"expected a URL like {example}"
    scheme, sep, rest = value.partition("://")
    if not sep:
        if default_scheme is None:
            raise ValueError(f"{setting}={value!r} has no scheme; {expected}")
        scheme, rest = default_scheme, value
    if scheme.lower() not in ("http", "https"):
        raise ValueError(f"{setting}={value!r}: scheme {scheme!r} is not http or https; "
                         f"{expected}")
    split = urllib.parse.urlsplit(f"{scheme}://{rest}")
    try:
        port, detail = split.port, ""
    except ValueError as error:
        port, detail = -1, f" ({error})"
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{setting}={value!r}: the port must be a number from 1 to 65535"
                         f"{detail}; {expected}")
    return split
