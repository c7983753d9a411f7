"""``lousho observe`` as the entry points run it: observe's daemon command, wired with what observe may not import.

Observe depends on no other part (DESIGN §1), yet the daemon serves the page (which reads analysis, improve and
recover), and refuses at start an ``--agent`` whose harness or check module the improve part cannot use and a
model URL the models part refuses: every cycle would fail on them. An entry point may import every part, so the
wiring lives here; ``lousho.cli``'s table of commands, which ``python -m lousho.observe`` runs too, names it.
"""

from __future__ import annotations

from lousho.kernel.errors import LoushoError
from lousho.observe.daemon_cli import Wiring, wired
from lousho.observe.errors import AgentCheckInvalid, AgentDirInvalid
from lousho.observe.trigger.cycle import AgentSpec
from lousho.page.cli import make_page


def check_agent(agent: AgentSpec) -> None:
    """DIR must hold a harness, and CHECK_MODULE must import and define ``check``: refused with observe's
    codes otherwise. Importing runs the module's top level, as each cycle will."""
    # Loaded only when an --agent is given: a daemon without one does not pay for the improve part.
    from lousho.improve.check_module import load_check_module
    from lousho.improve.harness import read_harness

    try:
        read_harness(agent.directory)
    except LoushoError as e:
        raise AgentDirInvalid(f"--agent {agent.name}: {e.message}") from None
    try:
        load_check_module(agent.check)
    except LoushoError as e:
        # A package the module imports is missing from this interpreter: improve's hint (where to install) is the fix.
        hint = e.hint if e.code == "LOUSHO_IMPROVE_CHECK_IMPORT" else None
        raise AgentCheckInvalid(f"--agent {agent.name}: {e.message}", hint=hint) from None


def check_model_url(url: str) -> None:
    """The models part's check (``LOUSHO_MODELS_CONFIG_INVALID``); its message omits credentials."""
    from lousho.models.client import check_url

    check_url(url)


observe = wired(Wiring(make_page=make_page, check_agent=check_agent, check_model_url=check_model_url))
