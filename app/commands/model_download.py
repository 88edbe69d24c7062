"""`m3agent model download REPO`: a checkpoint from the Hugging Face hub, resumable.

huggingface_hub resumes what an interrupted run left (run the command again) and draws its
progress bars on stderr; the path of the finished checkpoint is the one line on stdout, so
`--model "$(m3agent model download MiniMaxAI/MiniMax-M3)"` works.
"""

from __future__ import annotations

from pathlib import Path

import typer
from m3agent.engine.model_source import looks_like_repo_id

from ..cli_errors import die
from ..exit_codes import ENGINE_UNAVAILABLE


def register_download(model_app: typer.Typer) -> None:
    @model_app.command("download")
    def download(
        repo: str = typer.Argument(..., help="Hub repo id, e.g. MiniMaxAI/MiniMax-M3."),
        local_dir: Path | None = typer.Option(
            None, "--dir", help="Download into this directory (default: the hub cache)."
        ),
        revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit."),
        include: list[str] = typer.Option(
            [], "--include", help="Only files matching this glob (repeatable)."
        ),
    ) -> None:
        """Download a model from the hub (resumable; progress on stderr; path on stdout).

        Exit 0 when complete, 2 for a bad repo id, 3 when the hub cannot be reached or the
        repository is missing, gated or private.
        """
        if not looks_like_repo_id(repo):
            die(f"{repo!r} is not a hub repo id (owner/name)")
        try:
            import huggingface_hub as hf
        except ImportError:
            die(
                "huggingface_hub is not installed (pip install huggingface_hub)", ENGINE_UNAVAILABLE
            )
        try:
            path = hf.snapshot_download(
                repo,
                revision=revision,
                local_dir=str(local_dir) if local_dir else None,
                allow_patterns=list(include) or None,
            )
        except hf.errors.RepositoryNotFoundError:
            die(f"no model {repo} on the hub (or it is private: set HF_TOKEN)", ENGINE_UNAVAILABLE)
        except hf.errors.GatedRepoError:
            die(
                f"{repo} is gated: accept its terms on the hub and set HF_TOKEN", ENGINE_UNAVAILABLE
            )
        except Exception as e:  # offline, DNS, HTTP errors: many classes across versions
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            die(f"cannot download {repo}: {first} (run again to resume)", ENGINE_UNAVAILABLE)
        typer.echo(path)
