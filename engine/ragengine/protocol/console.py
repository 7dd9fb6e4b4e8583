"""``GET /whoami``: who the caller is and what it may do, for the console (and any client that asks)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Features(BaseModel):
    llm: bool = Field(..., description="An LLM is configured (without one, chat answers extractively).")
    evaluations: bool = Field(..., description="The engine serves GET /indexes/{name}/evaluations.")


class WhoAmI(BaseModel):
    principal: str = Field(..., description="The key's name, the ServiceAccount's namespace/name, or 'anonymous'.")
    kind: Literal["key", "serviceaccount", "anonymous"]
    role: Literal["read", "write", "admin"]
    auth: bool = Field(..., description="The engine requires credentials (false: open, every caller is an admin).")
    indexes: list[str] = Field(..., description="The indexes this principal sees (GET /indexes).")
    features: Features
