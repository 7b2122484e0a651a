"""`OpenAIBackend`: any OpenAI-compatible server through the `openai` client (an extra). The
key never leaves the client; the client's own retries are off (the base class retries).
See docs/llm.md, "OpenAI-compatible servers".
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ..errors import one_line
from .backend import LLMBackend, Transient
from .errors import (
    LLMError,
    LLMReplyError,
    LLMUnavailableError,
    ModelNotFoundError,
    StructuredOutputError,
)
from .urls import check_http_url

__all__ = ["API_KEY_ENV_SUFFIXES", "DUMMY_API_KEY", "INSTALL_HINT", "OpenAIBackend",
           "check_base_url", "read_api_key"]

INSTALL_HINT = "pip install 'langadapt[openai]'"
#: The key sent when ``api_key_env`` is None (local servers that need none).
DUMMY_API_KEY = "no-key-needed"
#: How the name of ``api_key_env`` must end (its value goes to ``base_url``).
API_KEY_ENV_SUFFIXES = ("_API_KEY", "_API_TOKEN")
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]+")
#: What an API key may hold once surrounding white space is stripped: printable ASCII.
_KEY_CHARS = re.compile(r"[\x21-\x7e]+")


def read_api_key(name: str) -> str:
    """The API key in variable ``name``, stripped; ValueError naming the variable (never the
    key) when unset, blank or not printable ASCII."""
    key = os.environ.get(name, "").strip()
    if not key:
        raise ValueError(f"the environment variable {name} that api_key_env names is not set; "
                         "export it with the API key, or set api_key_env: null (--api-key-env "
                         "none on the command line) for a server that needs no key")
    if not _KEY_CHARS.fullmatch(key):
        raise ValueError(f"the environment variable {name} that api_key_env names holds a "
                         "character other than printable ASCII inside the key (a space, tab, "
                         "newline or control character); expected the key alone")
    return key


def _forms(secret: str) -> set[str]:
    """``secret`` plain, ``repr``-escaped (str and bytes) and JSON-escaped."""
    return {secret, repr(secret)[1:-1], repr(secret.encode())[2:-1], json.dumps(secret)[1:-1]}


def check_base_url(url: str) -> str:
    """``url`` (``http[s]://host[:port][/path]``) without a trailing ``/``, else ValueError."""
    example = "expected a URL like http://127.0.0.1:8000/v1"
    if "@" in url.partition("://")[2].partition("/")[0]:  # not quoted: it may hold a key
        raise ValueError("base_url holds a user name or password (user:secret@host), which "
                         "would be stored in config.yaml and the cache identity; remove it and "
                         "put the key in the environment variable api_key_env names")
    split = check_http_url(url, "base_url", "http://127.0.0.1:8000/v1")
    if not split.hostname:
        raise ValueError(f"base_url={url!r} names no host; {example}")
    if split.query or split.fragment:
        raise ValueError(f"base_url={url!r}: a query or fragment does not belong in it; {example}")
    return url.rstrip("/")


def _schema_name(schema: dict) -> str:
    """A ``json_schema.name``: the schema's title, else ``reply``."""
    title = schema.get("title")
    name = _SCHEMA_NAME.sub("_", title).strip("_")[:64] if isinstance(title, str) else ""
    return name or "reply"


class _Client:
    """The openai client of one backend, its transport and its key."""

    def __init__(self, client: Any, transport: Any, key: str, raw: str = "") -> None:
        self.client, self.transport, self.key = client, transport, key
        #: every form of the key (and of the variable's raw value) that errors must not show
        self.secrets = sorted(_forms(key) | (_forms(raw) if raw.strip() else set()),
                              key=len, reverse=True)

    def __repr__(self) -> str:  # never the key
        return f"_Client(base_url={str(self.client.base_url)!r})"


class OpenAIBackend(LLMBackend):
    """An OpenAI-compatible server (local or remote)."""

    # A value put where a name belongs may be a key: errors never echo the input.
    model_config = ConfigDict(**LLMBackend.model_config, hide_input_in_errors=True)

    name: ClassVar[str] = "openai"
    supports_concurrency: ClassVar[bool] = True
    #: Chat completions cannot give the log-probability of a reply chosen beforehand.
    supports_scoring: ClassVar[bool] = False

    base_url: str = Field(min_length=1, description="the server's API root, e.g. "
                          "http://127.0.0.1:8000/v1 (required)")
    model: str = Field(min_length=1, description="the model name the server knows")
    timeout: float = Field(120.0, gt=0, le=86_400,
                           description="seconds one attempt may take in all (not per read)")
    api_key_env: str | None = Field(
        "OPENAI_API_KEY", min_length=1,
        description="name (in capitals) of the environment variable holding the API key "
                    "(the key itself is never a setting); None = no key (a dummy is sent)")
    structured_output: Literal["auto", "json_schema", "json_object"] = Field(
        "auto", description="how the JSON schema is sent: json_schema (OpenAI's form), "
        "json_object with a schema (llama-cpp-python's server), or auto (json_schema, "
        "json_object when the server refuses it)")
    strict: bool = Field(True, description="json_schema.strict (OpenAI: every object needs "
                         "additionalProperties false and all properties required)")

    @model_validator(mode="before")
    @classmethod
    def _needs_openai(cls, data: Any) -> Any:
        # Not a ValueError: pydantic passes it through as it is (one line, not a report).
        if importlib.util.find_spec("openai") is None:
            raise LLMUnavailableError(
                f"the openai backend needs the openai package: {INSTALL_HINT}")
        return data

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return check_base_url(value)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        # Capitals only: a key (nearly always with small letters) is refused, and not quoted.
        if value is not None and not re.fullmatch(r"[A-Z_][A-Z0-9_]{0,127}", value):
            raise ValueError("api_key_env is not an environment variable name in capitals; "
                             "give the NAME of the variable that holds the key (e.g. "
                             "OPENAI_API_KEY), never the key itself")
        # Its value is sent to base_url: never an unrelated secret (AWS_SECRET_ACCESS_KEY).
        if value is not None and not value.endswith(API_KEY_ENV_SUFFIXES):
            ends = " or ".join(API_KEY_ENV_SUFFIXES)
            raise ValueError(f"api_key_env={value!r}: the variable's value is sent to "
                             f"base_url, so its name must end in {ends} (e.g. "
                             "OPENAI_API_KEY); copy the key into such a variable")
        return value

    @model_validator(mode="after")
    def _key_readable(self) -> OpenAIBackend:
        # A key set now is checked now (one line, no request); an unset one at first use.
        if self.api_key_env is not None and os.environ.get(self.api_key_env, "").strip():
            read_api_key(self.api_key_env)
        return self

    # ---- the client ------------------------------------------------------------------
    def _client(self) -> _Client:
        return self.runtime.once("client", self._new_client)

    def _new_client(self) -> _Client:
        raw = "" if self.api_key_env is None else os.environ.get(self.api_key_env, "")
        if self.api_key_env is None:
            key = DUMMY_API_KEY
        else:
            try:
                key = read_api_key(self.api_key_env)
            except ValueError as error:
                raise LLMError(f"{self.where()}: {error}") from None
        import openai

        from .transport import deadline_transport_class  # imports httpx: on first use only

        # the httpx (or httpx2) the client is built on
        base = next(c for c in openai.DefaultHttpxClient.__mro__ if c.__name__ == "Client")
        transport = deadline_transport_class(
            importlib.import_module(base.__module__.split(".")[0]))()
        # redirects are not followed: the prompt and key would go elsewhere
        client = openai.OpenAI(
            base_url=self.base_url, api_key=key, timeout=self.timeout, max_retries=0,
            http_client=openai.DefaultHttpxClient(transport=transport, timeout=self.timeout,
                                                  follow_redirects=False))
        return _Client(client, transport, key, raw)

    def _redact(self, text: Any) -> str:
        """``text`` on one line, with the API key cut out in every form."""
        made = self.runtime.built("client")
        text = str(text)
        if made is not None and made.key != DUMMY_API_KEY:
            for secret in made.secrets:
                text = text.replace(secret, "***")
        return one_line(text, 200)

    # ---- what a backend supplies ------------------------------------------------------
    def where(self) -> str:
        return f"the OpenAI-compatible server at {self.base_url} (model {self.model!r})"

    def structured_output_hint(self) -> str:
        return ("the server did not enforce the JSON schema sent in response_format; use a "
                "server with structured outputs (llama-server, llama_cpp.server, vLLM, LM "
                "Studio, OpenAI) or try structured_output: json_object / json_schema")

    def served_model_id(self, timeout: float | None = None) -> str | None:
        """The id ``GET /models`` lists for ``model`` (itself, or the only one), else None."""
        made = self._client()
        import openai

        from .transport import ReplyTooLarge, reply_byte_cap

        # a first call's lookup counts against its deadline
        end, _ = self.attempt_end(self.timeout if timeout is None else min(timeout, self.timeout),
                                  self.call_deadline())
        try:
            with made.transport.until(end, reply_byte_cap(self.max_reply_chars)):
                listed = [getattr(m, "id", None) for m in made.client.models.list()]
        except (openai.OpenAIError, ValueError, TypeError, AttributeError, RecursionError,
                ReplyTooLarge):
            return None
        ids = [i for i in listed if isinstance(i, str) and i]
        if self.model in ids:
            return self.model
        return ids[0] if len(ids) == 1 else None

    def probe(self, timeout: float = 5.0) -> None:
        """``GET /models`` within ``timeout``: an `LLMUnavailableError` when no server answers
        at ``base_url``, an `LLMError` when it refuses the key; any other answer (a server
        without ``/models`` included) passes."""
        made = self._client()
        import openai

        from .transport import ReplyTooLarge, reply_byte_cap

        end = time.monotonic() + min(timeout, self.timeout)
        try:
            with made.transport.until(end, reply_byte_cap(self.max_reply_chars)):
                made.client.models.list()
        except openai.APIConnectionError as error:
            raise self._unreachable(error) from None
        except openai.APIStatusError as error:
            if error.status_code in (401, 403):
                raise LLMError(f"{self.where()} refused the request (HTTP {error.status_code}: "
                               "a missing or wrong key; see api_key_env)") from None
        except (openai.OpenAIError, ValueError, TypeError, AttributeError, RecursionError,
                ReplyTooLarge):
            pass  # it answered

    def resolve_identity(self) -> str:
        """``openai:<base_url>#<model>``, plus ``@<id>`` the server lists when it differs."""
        identity = f"openai:{self.base_url}#{self.model}"
        served = self.served_model_id()
        return identity if served in (None, self.model) else f"{identity}@{served}"

    # ---- one attempt -----------------------------------------------------------------
    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int,
                 *, seed: int | None = None, deadline: float | None = None) -> str:
        """One chat completion, ended by ``timeout`` or ``deadline``."""
        made = self._client()
        import openai

        from .transport import ReplyTooLarge, cause_of, reply_byte_cap

        end, limit = self.attempt_end(self.timeout, deadline)
        try:
            with made.transport.until(end, reply_byte_cap(self.max_reply_chars)):
                reply = self._create(made.client, messages, schema, max_tokens,
                                     self.seed if seed is None else seed)
        except openai.APITimeoutError as error:
            raise Transient(LLMUnavailableError(
                f"{self.where()} did not answer within {limit}")) from error
        except (openai.APIConnectionError, ReplyTooLarge) as error:
            too_large = cause_of(error, ReplyTooLarge)
            if too_large is None:
                raise Transient(self._unreachable(error)) from error
            raise LLMReplyError(
                f"{self.where()} sent a reply of more than {too_large.limit:,} bytes "
                f"(the cap for max_reply_chars={self.max_reply_chars:,}); not read further"
            ) from None
        except (json.JSONDecodeError, RecursionError) as error:  # an HTTP 200 body, unparsed
            raise LLMReplyError(f"{self.where()} sent a reply that is not a valid chat "
                                f"completion (the body is not JSON: {type(error).__name__})"
                                ) from None
        except openai.APIStatusError as error:
            raise self._status_error(error, schema) from error
        except openai.APIError as error:  # e.g. a reply that is not a chat completion
            raise LLMReplyError(f"{self.where()} sent a reply that is not a valid chat "
                                f"completion: {self._redact(error)}") from error
        return self._content_of(reply)

    def _create(self, client: Any, messages: list[dict[str, str]], schema: dict | None,
                max_tokens: int, seed: int) -> Any:
        """``chat.completions.create``, switching once to the forms a server asks for."""
        import openai

        while True:
            form = self._form()
            tokens = "max_completion_tokens" if self.runtime.built(
                "max_completion_tokens") else "max_tokens"
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages,
                                      "temperature": self.temperature, "seed": seed,
                                      tokens: max_tokens}
            if schema is not None:
                kwargs["response_format"] = (
                    {"type": "json_schema", "json_schema": {
                        "name": _schema_name(schema), "schema": schema, "strict": self.strict}}
                    if form == "json_schema" else {"type": "json_object", "schema": schema})
            try:
                return client.chat.completions.create(**kwargs)
            except openai.APIStatusError as error:
                text = str(error.message).lower()
                if (tokens == "max_tokens" and error.status_code in (400, 422)
                        and "max_completion_tokens" in text):
                    self.runtime.once("max_completion_tokens", lambda: True)
                    continue
                if (schema is not None and form == "json_schema"
                        and self.structured_output == "auto" and _refuses_json_schema(error)):
                    self.runtime.once("structured_form", lambda: "json_object")
                    continue
                raise

    def _form(self) -> str:
        if self.structured_output != "auto":
            return self.structured_output
        return self.runtime.built("structured_form") or "json_schema"

    def _unreachable(self, error: BaseException) -> LLMUnavailableError:
        cause = error.__cause__ or error.__context__
        name = type(cause).__name__ if cause is not None else ""
        if "ConnectError" in name or isinstance(cause, ConnectionRefusedError):
            return LLMUnavailableError(
                f"no server is answering at {self.base_url} (model {self.model!r}): "
                f"{self._redact(cause)}; start one (e.g. `python -m llama_cpp.server --model "
                "FILE.gguf`) or point base_url at a running server")
        detail = f"{name}: {self._redact(cause)}" if cause is not None else self._redact(error)
        return LLMUnavailableError(f"{self.where()}: the connection failed ({detail})")

    def _status_error(self, error: Any, schema: dict | None) -> LLMError | Transient:
        status = error.status_code
        # the client's message starts "Error code: 401 - ": the status is said once below
        said = self._redact(re.sub(r"^Error code: \d+(?: - )?", "", str(error.message))
                            ) or "no details"
        if status >= 500 or status == 429:
            from .transport import retry_after  # imports httpx: on first use only

            wait = retry_after(getattr(error.response, "headers", None))
            asked = "" if wait is None else f" (Retry-After: {wait:g} s)"
            return Transient(LLMError(f"{self.where()} answered HTTP {status}: {said}{asked}"),
                             wait, server_full=status in (429, 503))
        if 300 <= status < 400:
            location = self._redact(error.response.headers.get("location", "")) or "nowhere"
            return LLMError(
                f"{self.where()} answered HTTP {status}, a redirect to {location}; redirects "
                "are not followed (the prompt and key would go there and its answer be cached "
                "under base_url): set base_url to the address the server names")
        if status in (401, 403):
            whose = (f"the key in ${self.api_key_env}" if self.api_key_env is not None
                     else "no key (api_key_env: null)")
            fix = ("check the key" if self.api_key_env is not None else
                   "set api_key_env to the name of the environment variable holding the key")
            return LLMError(f"{self.where()} refused {whose} (HTTP {status}: {said}); {fix}")
        if status == 404:
            code = str(getattr(error, "code", "") or "")
            if code == "model_not_found" or (self.model.lower() in said.lower()
                                             and "model" in said.lower()):
                return ModelNotFoundError(
                    f"{self.where()}: the server has no model {self.model!r} (HTTP 404: {said})"
                    f"; see GET {self.base_url}/models for the names it serves")
            return LLMUnavailableError(
                f"{self.base_url} is not an OpenAI-compatible server (model {self.model!r}): "
                f"POST {self.base_url}/chat/completions answered HTTP 404 ({said}); base_url "
                "is the API root, which usually ends in /v1 (e.g. http://127.0.0.1:8000/v1)")
        if schema is not None and ("response_format" in said.lower()
                                   or "schema" in said.lower()):
            return StructuredOutputError(
                f"{self.where()} rejected the JSON schema in response_format (HTTP {status}: "
                f"{said}); {self.structured_output_hint()}"
                + ("; with strict: true every object needs additionalProperties: false and "
                   "all its properties required" if self.strict else ""))
        return LLMError(f"{self.where()} rejected the request (HTTP {status}: {said})")

    def _content_of(self, reply: Any) -> str:
        choices = getattr(reply, "choices", None)
        if not choices:
            raise LLMReplyError(f"{self.where()} sent a reply with no choices: "
                                f"{self._redact(repr(reply))}")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if content is None:
            refusal = getattr(message, "refusal", None)
            if refusal:
                raise LLMReplyError(f"{self.where()} refused to answer: {self._redact(refusal)}")
            return ""
        if not isinstance(content, str):
            raise LLMReplyError(f"{self.where()} sent message.content of type "
                                f"{type(content).__name__}; expected text")
        return content


def _refuses_json_schema(error: Any) -> bool:
    """Whether the server does not know ``response_format`` type ``json_schema``
    (llama-cpp-python's HTTP 500 "Input should be 'text' or 'json_object'")."""
    if error.status_code not in (400, 422, 500):
        return False
    text = str(error.message).lower()
    return "json_schema" in text and any(
        word in text for word in ("json_object", "input should be", "not supported",
                                  "unsupported", "unknown variant", "literal"))
