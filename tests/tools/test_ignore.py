"""The gitignore subset the Python walk uses (and that ripgrep follows too)."""

from __future__ import annotations

from m3agent.tools.ignore import walk


def test_gitignore_semantics(tmp_path):
    files = [
        "a.py",
        "a.log",
        "keep.log",
        "build/x.o",
        "src/build/y.o",
        "docs/build/z.md",
        "src/gen/out.py",
        "src/pkg/mod.py",
        "src/pkg/secret.tmp",
        "node_modules/m/i.js",
        ".git/config",
        ".hidden/h.py",
    ]
    for f in files:
        p = tmp_path / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x")
    (tmp_path / ".gitignore").write_text("*.log\n!keep.log\n/build/\nnode_modules\n**/*.tmp\n# c\n")
    (tmp_path / "src" / ".gitignore").write_text("gen/\nbuild\n")
    got = sorted(rel for rel, is_dir in walk(tmp_path) if not is_dir)
    assert got == sorted(
        [
            ".gitignore",
            ".hidden/h.py",
            "a.py",
            "docs/build/z.md",
            "keep.log",
            "src/.gitignore",
            "src/pkg/mod.py",
        ]
    )
    everything = {rel for rel, d in walk(tmp_path, respect_ignore=False) if not d}
    assert "build/x.o" in everything and ".git/config" not in everything
