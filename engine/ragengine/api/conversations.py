"""Routes for conversations (scaffold: the owner of this module replaces it)."""

from contextlib import AsyncExitStack

from fastapi import APIRouter, FastAPI

from ragengine.settings import EngineSettings

router = APIRouter()


async def startup(app: FastAPI, settings: EngineSettings, stack: AsyncExitStack) -> None:
    """Build this part's services onto app.state and push their clean-up onto stack."""
