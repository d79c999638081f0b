"""stepscope/patches.py, the one bookkeeper of what stepscope changes in the user's process: owned attributes are
set back, inherited ones deleted again, a patch someone wrapped over is left in their chain, undo hooks run in
order, and one attribute can be restored alone."""

from __future__ import annotations

from stepscope.patches import Patches


class Base:
    def item(self) -> str:
        return "base"


class Child(Base):
    def step(self) -> str:
        return "own"


def test_owned_is_set_back_and_inherited_deleted() -> None:
    p = Patches()
    before = p.wrap(Child, "step", lambda original: lambda self: "ours+" + original(self))
    assert Child().step() == "ours+own" and before is Child.__dict__["step"]
    p.replace(Child, "item", lambda self: "ours")  # inherited from Base
    assert "item" in vars(Child) and Child().item() == "ours"
    p.undo()
    assert Child().step() == "own" and "item" not in vars(Child) and Child().item() == "base"
    assert not p


def test_a_patch_wrapped_over_by_someone_else_stays_in_their_chain() -> None:
    class Loader:
        def fetch(self) -> str:
            return "own"

    p = Patches()
    ours = p.wrap(Loader, "fetch", lambda original: lambda self: "ours+" + original(self))
    theirs = lambda self: "theirs+" + ours(self)  # noqa: E731 - another tool wrapping over ours
    Loader.fetch = theirs  # type: ignore[method-assign]
    p.undo()
    assert vars(Loader)["fetch"] is theirs and Loader().fetch() == "theirs+ours+own"


def test_undo_hooks_run_in_order_and_one_attribute_restores_alone() -> None:
    p, done = Patches(), []
    p.on_undo(lambda: done.append("first"))
    p.replace(Base, "item", lambda self: "x")
    p.replace(Child, "step", lambda self: "y")
    p.on_undo(lambda: done.append("last"))
    p.restore(Base, "item")
    assert Base().item() == "base" and Child().step() == "y" and p.patched(Child, "step")
    assert not p.patched(Base, "item")
    p.undo()
    assert done == ["last", "first"] and Child().step() == "own"
