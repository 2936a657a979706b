"""A step is typed against StepContext, what it may use; the engine must offer every
part of it, each method taking at least the declared parameters, or a step written
against the context fails at run time."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Collection

import pytest

from app import egress, notify, review_threads, reviewers
from app.autofix import context as autofix_context
from app.commands import context as commands_context
from app.engine import Engine, StepContext
from app.envbuilds import context as envbuilds_context
from app.fanout import context as fanout_context
from app.intake import redelivery
from app.landing import context as landing_context
from app.metrics import Metrics
from app.repositories import context as repositories_context
from app.runs import context as runs_context
from app.store import Store
from tests.sources import app_files


def _members(protocol: type) -> tuple[set[str], dict[str, object]]:
    attributes = set(protocol.__annotations__)
    methods = {name: value for name, value in vars(protocol).items()
               if callable(value) and not name.startswith("_")}
    return attributes, methods


def test_the_engine_offers_every_attribute_of_the_step_context(settings):
    engine = Engine(settings=settings, store=Store(settings.db_path), auth=None,
                    metrics=Metrics(), tokens=None)
    attributes, _ = _members(StepContext)
    assert {"store", "settings", "tokens", "envs", "github", "providers"} <= attributes
    assert [a for a in sorted(attributes) if not hasattr(engine, a)] == []


def test_the_engine_offers_every_method_of_the_step_context_with_its_shape():
    _, methods = _members(StepContext)
    assert {"wake", "patch_run"} <= set(methods)
    for name, declared in methods.items():
        offered = getattr(Engine, name, None)
        assert offered is not None, f"Engine has no {name}"
        assert inspect.iscoroutinefunction(offered) == inspect.iscoroutinefunction(declared), name
        offered_parameters = list(inspect.signature(offered).parameters)
        declared_parameters = list(inspect.signature(declared).parameters)
        assert offered_parameters[:len(declared_parameters)] == declared_parameters, name


# The modules whose functions are steps, or helpers steps call with their context.
STEP_MODULES = ("commands", "runs", "landing", "autofix", "fanout", "repositories",
                "intake/redelivery", "envbuilds", "egress", "reviewers", "review_threads")


def used_of_the_context(source: str, whole: Collection[str] = ()) -> set[str]:
    """Every `engine.<name>` the source reads or calls, but in `register(engine)`, which
    registers a concern with the engine (Registrations) and is no step, and in the
    functions named in `whole`, which take the whole StepContext."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                and node.name in ("register", *whole):
            node.body = []
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "engine"}


def test_the_reader_sees_reads_and_calls():
    assert used_of_the_context("def f(engine):\n    engine.wake()\n    x = engine.store\n") \
        == {"wake", "store"}


def test_the_reader_leaves_out_a_function_that_takes_the_whole_context():
    source = "async def f(engine):\n    engine.wake()\n\ndef g(engine):\n    engine.note()\n"
    assert used_of_the_context(source, whole=("f",)) == {"note"}


@pytest.mark.parametrize("module", STEP_MODULES)
def test_a_step_uses_only_what_its_context_offers(module):
    attributes, methods = _members(StepContext)
    # A concern's plugin.py registers it with the engine (Registrations), not a step.
    used = set().union(*(used_of_the_context(path.read_text()) for path in app_files(module)
                         if path.name != "plugin.py"))
    assert sorted(used - attributes - set(methods)) == [], (
        f"app/{module} uses these of the engine that StepContext does not name: add "
        "them to StepContext (app/engine.py) if a step may use them")


# Concerns that declare their own, narrower context: their steps and helpers use only it
# (but for the files, or `file:function`s, named, which take the whole StepContext:
# fan-out's and runs' commands start jobs and turns; the intent's step hands the engine
# on to each command's action, the rebuild's chore to runs' reaper).
OWN_CONTEXTS = {"landing": (landing_context.LandingContext, ()),
                "autofix": (autofix_context.AutofixContext, ()),
                "fanout": (fanout_context.FanoutContext, ("commands.py",)),
                "notify": (notify.NotifyContext, ()),
                "envbuilds": (envbuilds_context.EnvbuildsContext, ()),
                "intake/redelivery": (redelivery.RedeliveryContext, ()),
                "egress": (egress.EgressContext, ()),
                "commands": (commands_context.CommandsContext, ("intents.py:process_intent",)),
                "repositories": (repositories_context.RepositoriesContext,
                                 ("rebuild.py:run_pending_rebuild",)),
                "runs": (runs_context.RunsContext, ("commands.py",)),
                "reviewers": (reviewers.ReviewersContext, ()),
                "review_threads": (review_threads.ThreadsContext, ())}


@pytest.mark.parametrize("module", sorted(OWN_CONTEXTS))
def test_a_concern_uses_only_what_its_own_context_names(module):
    context, whole = OWN_CONTEXTS[module]
    attributes, methods = _members(context)
    used: set[str] = set()
    for path in app_files(module):
        if path.name in ("plugin.py", *whole):
            continue
        functions = [name.partition(":")[2] for name in whole
                     if name.partition(":")[0] == path.name]
        used |= used_of_the_context(path.read_text(), functions)
    assert sorted(used - attributes - set(methods)) == [], (
        f"app/{module} uses these of the engine that {context.__name__} does not name")
