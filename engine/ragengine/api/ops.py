"""Routes for ops (scaffold: the owner of this module replaces it)."""

from contextlib import AsyncExitStack

from fastapi import APIRouter, FastAPI

from ragengine.settings import EngineSettings

router = APIRouter()


