#!/usr/bin/env python3
"""A deterministic source-like tree of many files, and its "changed night".

    bench/many_files.py make   DATA FILES SEED   # the tree, and DATA.sha256 (its manifest)
    bench/many_files.py apply  DATA FILES SEED   # the change, and DATA.changed.sha256
    bench/many_files.py revert DATA FILES SEED   # back to what `make` wrote (only mtimes differ)

The same FILES and SEED give the same bytes on every machine. The tree has FILES files in about
FILES / 20 folders, nested up to six deep like a source checkout, with a spread of sizes:

    share  kind                                   sizes                 compresses
  75.5 %   small text (source, configs)        60 B - 8 KiB, median ~1.3 KiB   yes
  12   %   medium text (bigger sources, docs)  8 - 32 KiB (log-uniform)        yes
   5   %   small binary (icons, objects)       200 B - 32 KiB (log-uniform)    no (random bytes)
   4   %   duplicates of an earlier file       as the original                 (dedup)
   3.4 %   empty files (__init__.py, .gitkeep) 0 B
   0.1 %   large (archives, data, media)       256 KiB - 4 MiB                 half yes, half no

About 5.5 KB per file on average: 200 000 files are ~1.1 GB.

Text is cut from a 16 MiB corpus of generated source-like lines at a random offset, each file
starting with a line of its own (so no two text files are equal unless made duplicates on
purpose). The change ("a day of work"): 1 % of the files get a few lines appended, 0.2 % are
deleted, and a new folder of 0.5 % x FILES new small files appears. `revert` puts it all back.
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys

CORPUS_BYTES = 16 << 20
WORDS = ("fn let mut self impl struct enum match return if else for while loop use pub mod const "
         "static type trait where async await Result Option Some None Ok Err String Vec HashMap "
         "value index buffer count offset length error config request response client server "
         "handler context token parser writer reader stream chunk block node tree path name "
         "kind state status message item entry key id data file dir size time").split()
PUNCT = ["(", ")", "{", "}", ";", ",", ".", " = ", " -> ", "::", "&", "[", "]", " + ", " == "]
NEW_DIR = "zz-new-work"


def corpus(seed):
    """Source-like text: indented lines of identifiers, punctuation and comments."""
    rng = random.Random(f"{seed}-corpus")
    lines, size = [], 0
    while size < CORPUS_BYTES:
        depth = rng.choice((0, 1, 1, 2, 2, 2, 3, 3, 4))
        if rng.random() < 0.12:
            body = "// " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        else:
            parts = []
            for _ in range(rng.randint(2, 9)):
                parts.append(rng.choice(WORDS) + (str(rng.randint(0, 99)) if rng.random() < 0.2 else ""))
                parts.append(rng.choice(PUNCT))
            body = "".join(parts)
        line = "    " * depth + body + "\n"
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()


def folders(files, rng):
    """About files/20 folder paths, nested up to six deep, parents before children."""
    wanted = max(1, files // 20)
    names = ["src", "lib", "test", "docs", "pkg", "internal", "api", "core", "util", "vendor",
             "cmd", "assets", "build", "scripts", "examples", "include", "bench", "config"]
    out = [""]
    while len(out) < wanted:
        parent = rng.choice(out[-200:] if rng.random() < 0.6 else out)
        if parent.count("/") >= 5:
            continue
        name = f"{rng.choice(names)}-{len(out)}"
        out.append(f"{parent}/{name}" if parent else name)
    return out


def plan(files, seed):
    """Every file as (path, kind, size, extra): the same list for the same arguments."""
    rng = random.Random(f"{seed}-plan")
    dirs = folders(files, rng)
    exts = [".rs", ".go", ".py", ".js", ".ts", ".c", ".h", ".md", ".json", ".yaml", ".toml", ".txt"]
    out = []
    for i in range(files):
        d = dirs[int(len(dirs) * rng.random() ** 1.3)] if i >= len(dirs) else dirs[i]
        r = rng.random()
        if r < 0.755:
            kind, size = "text", min(8192, max(60, int(rng.lognormvariate(7.2, 1.0))))
        elif r < 0.875:
            kind, size = "text", int(8192 * 4 ** rng.random())
        elif r < 0.925:
            kind, size = "binary", int(200 * 160 ** rng.random())
        elif r < 0.965 and out:
            kind, size = "dup", rng.randrange(len(out))
        elif r < 0.999:
            kind, size = "empty", 0
        else:
            kind, size = rng.choice(("text", "binary")), rng.randint(256 << 10, 4 << 20)
        ext = ".bin" if kind == "binary" else rng.choice(exts)
        name = f"{d}/f{i:07d}{ext}" if d else f"f{i:07d}{ext}"
        out.append((name, kind, size, rng.random()))
    return out


def content(entry, number, text, seed, entries):
    name, kind, size, extra = entry
    if kind == "dup":
        return content(entries[size], size, text, seed, entries)
    if kind == "empty":
        return b""
    if kind == "binary":
        return hashlib.shake_256(f"{seed}-{number}".encode()).digest(size)
    head = f"// {name} ({number})\n".encode()
    start = int(extra * (len(text) - size - 1))
    return (head + text[start:start + size])[:max(size, len(head))]


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def manifest(root, out):
    listing = subprocess.run(f"cd '{root}' && find . -type f -print0 | sort -z | xargs -0 -P 2 -n 512 sha256sum | sort -k2",
                             shell=True, check=True, capture_output=True).stdout
    with open(out, "wb") as f:
        f.write(listing)


def changed_picks(entries, seed):
    rng = random.Random(f"{seed}-change")
    n = len(entries)
    grown = sorted(rng.sample(range(n), max(1, n // 100)))
    gone = sorted(set(rng.sample(range(n), max(1, n // 500))) - set(grown))
    return grown, gone


def main():
    action, root, files, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    entries = plan(files, seed)
    text = corpus(seed)
    if action == "make":
        shutil.rmtree(root, ignore_errors=True)
        for number, entry in enumerate(entries):
            write(os.path.join(root, entry[0]), content(entry, number, text, seed, entries))
        manifest(root, root + ".sha256")
    elif action == "apply":
        grown, gone = changed_picks(entries, seed)
        for number in grown:
            with open(os.path.join(root, entries[number][0]), "ab") as f:
                f.write(f"// changed on the second night ({number})\n".encode() + text[number % 4096:][:300])
        for number in gone:
            os.remove(os.path.join(root, entries[number][0]))
        rng = random.Random(f"{seed}-new")
        for k in range(max(1, files // 200)):
            size = min(8192, max(60, int(rng.lognormvariate(7.2, 1.0))))
            start = rng.randrange(len(text) - size)
            write(os.path.join(root, NEW_DIR, f"d{k // 50:03d}", f"n{k:06d}.rs"),
                  f"// new file {k}\n".encode() + text[start:start + size])
        manifest(root, root + ".changed.sha256")
    elif action == "revert":
        grown, gone = changed_picks(entries, seed)
        for number in grown + gone:
            write(os.path.join(root, entries[number][0]), content(entries[number], number, text, seed, entries))
        shutil.rmtree(os.path.join(root, NEW_DIR), ignore_errors=True)
    else:
        sys.exit(f"many_files.py: unknown action {action} (make, apply, revert)")


if __name__ == "__main__":
    main()
