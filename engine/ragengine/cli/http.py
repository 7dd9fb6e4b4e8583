"""What the client commands (``index``, ``export``, ``import``) share: the API key (from the environment; a flag
works, with a warning), an HTTP client for the engine, and an engine's refusal as a command error."""

from __future__ import annotations

import click

API_KEY_FLAG_WARNING = ("warning: --api-key is visible to other users of this machine (ps, /proc); "
                        "set RAGENGINE_API_KEY instead")


def api_key_from(flag: str | None) -> str | None:
    """The key from RAGENGINE_API_KEY; the --api-key flag still works, with a warning."""
    import os

    if flag:
        click.echo(API_KEY_FLAG_WARNING, err=True)
        return flag
    return os.environ.get("RAGENGINE_API_KEY") or None


API_KEY_HELP = "Bearer token; prefer the RAGENGINE_API_KEY environment variable (a flag shows in ps)."


def engine_client(url: str, api_key: str | None, timeout: float):
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)


def refusal(resp, what: str) -> click.ClickException:
    try:
        detail = resp.json().get("detail") or resp.text
    except ValueError:
        detail = resp.text
    return click.ClickException(f"{what} answered {resp.status_code}: {str(detail)[:500]}")
