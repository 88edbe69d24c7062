"""Preprocessing time of a 60 s 1080p clip (SPEC §5.2 path: decode, 1 fps, resize, patches).

Generates the clip itself (H.264, 30 fps, moving gradient so the encoder does real work),
then times `load_video` and reports frames, tokens and peak RSS growth.
Run: python bench/media_preprocess.py [--seconds 60] [--out bench/results/media_preprocess.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

import av
import numpy as np
from m3agent.engine.m3.media import load_video


def make_clip(path: Path, seconds: int, fps: int = 30, w: int = 1920, h: int = 1080) -> None:
    y, x = np.mgrid[0:h, 0:w]
    base = ((x + y) % 256).astype(np.uint8)
    with av.open(str(path), "w") as out:
        s = out.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.options = {"preset": "ultrafast", "crf": "23"}
        for i in range(seconds * fps):
            img = np.stack([np.roll(base, 8 * i, axis=1), base, np.roll(base, 4 * i, axis=0)], -1)
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts = i
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="bench/results/media_preprocess.json")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        clip = Path(d) / "clip_1080p.mp4"
        t0 = time.perf_counter()
        make_clip(clip, a.seconds)
        gen_s = time.perf_counter() - t0
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            item = load_video(clip)
            times.append(time.perf_counter() - t0)
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = {
            "clip": f"{a.seconds} s, 1920x1080, 30 fps, H.264 (libx264 ultrafast), "
            f"{clip.stat().st_size / 1e6:.1f} MB",
            "generate_clip_s": round(gen_s, 2),
            "preprocess_s": [round(t, 2) for t in times],
            "preprocess_best_s": round(min(times), 2),
            "decoded_frames": item.total_frames,
            "sampled_frames": len(item.frame_indices),
            "resized_hw": item.resized_hw,
            "grid_thw": item.grid_thw,
            "vision_tokens": item.num_tokens,
            "pixel_values_mb": round(item.pixel_values.nbytes / 1e6, 1),
            "peak_rss_growth_mb": round((rss1 - rss0) / 1024, 1),
            "cpus": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
            "pyav": av.__version__,
        }
    print(json.dumps(result, indent=2))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
