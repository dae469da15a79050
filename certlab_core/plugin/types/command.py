"""The record that adds a subcommand to ``certlab`` (``certlab_commands``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from attrs import field, frozen

from certlab_core.plugin.types.base import Record

if TYPE_CHECKING:
    import typer

    from certlab_core.plugin.types.services import Services


class RegisterCommand(Protocol):
    """Add the command to the typer app (``app.command(name)(function)``); import heavy modules here, not above."""

    def __call__(self, app: typer.Typer, /) -> None: ...


class RegisterServedCommand(Protocol):
    """Add the command to the typer app, with the kernel's services for it to use when it runs."""

    def __call__(self, app: typer.Typer, services: Services, /) -> None: ...


@frozen
class Command(Record):
    """One ``certlab`` subcommand a plugin provides: ``register(app)`` adds it under ``name``.

    A command line loads only the command it names: ``register`` is called for that one
    command (and for every command when a name no plugin provides is given), so it should
    import what the command needs inside it. ``certlab --help`` lists ``description``, a
    one-line summary, and calls no ``register``. A plugin's command may not take a name the
    kernel uses.

    A command that works on run stores and bundles takes a second, required positional
    parameter, ``register(app, services)``: the kernel sees it in the signature and passes its
    :class:`~certlab_core.plugin.types.services.Services` (open a store or a bundle, re-run or
    replay a trial, judge an ending, recompute a decision), which the command keeps for when it
    runs. A ``register(app)`` is called as before.
    """

    name: str
    description: str
    register: RegisterCommand | RegisterServedCommand = field(eq=False, repr=False)
