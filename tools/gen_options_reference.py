#!/usr/bin/python3
"""Writes docs/reference/options.md, the reference of every Accelerator option,
from the sources that define the options, so that it cannot drift from them.

  /usr/bin/python3 tools/gen_options_reference.py > docs/reference/options.md
  /usr/bin/python3 tools/gen_options_reference.py --check   # CTest docs_options_reference

What it reads (Python's standard library only):
- include/ampkit/accelerator/options.h: the fields of AcceleratorOptions
  (TORCH_ARG(type, name) with their /// comments) and the list
  AMPKIT_FORALL_PLAIN_ACCELERATOR_OPTIONS, whose entries are
  /* comment */ _(type, name, default); the kEnv* constants (the environment
  variables' names);
- src/accelerator/options.cpp: which option reads which variables, from its
  pick(options.NAME(), env, {kEnvA, kEnvB}, ..., FALLBACK) calls, and the
  fallback as the default;
- include/ampkit/distributed/*.h: the values of the distributed defaults that the
  list takes from dist::SyncOptions() and dist::GroupOptions().
It stops with an error when a source no longer has the shape it expects, or
when an environment variable declared in options.h is read by no option.
"""

import argparse
import difflib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPTIONS_H = "include/ampkit/accelerator/options.h"
OPTIONS_CPP = "src/accelerator/options.cpp"
DIST_HEADERS = "include/ampkit/distributed"
OUTPUT = "docs/reference/options.md"
MACRO = "AMPKIT_FORALL_PLAIN_ACCELERATOR_OPTIONS"


class SourceError(Exception):
    pass


def split_top_level(text, sep=","):
    """Splits at `sep` outside (), <>, {} and string literals."""
    parts, depth, current, in_string = [], 0, [], False
    for ch in text:
        if in_string:
            current.append(ch)
            if ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "(<{":
            depth += 1
        elif ch in ")>}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    return parts


def balanced_call(text, start):
    """The text between the parenthesis at `start` and its match."""
    if text[start] != "(":
        raise SourceError("expected '(' at offset %d" % start)
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:i], i + 1
    raise SourceError("unbalanced parentheses from offset %d" % start)


def squash(text):
    return " ".join(text.split())


def env_constants(header):
    found = dict(re.findall(
        r'constexpr\s+const\s+char\*\s+(kEnv\w+)\s*=\s*"([^"]+)"', header))
    if not found:
        raise SourceError(OPTIONS_H + ": no kEnv* constants found")
    return found


def plain_options(header):
    """(type, name, default, comment) of each entry of the X-macro list."""
    match = re.search(r"#define\s+" + MACRO + r"\(_\)[ \t]*\\?\n", header)
    if not match:
        raise SourceError(OPTIONS_H + ": no #define " + MACRO + "(_)")
    lines = []
    for line in header[match.end():].splitlines():
        continued = line.rstrip().endswith("\\")
        lines.append(line.rstrip().rstrip("\\"))
        if not continued:
            break
    body = "\n".join(lines)
    entries, comment, pos = [], None, 0
    while pos < len(body):
        if body[pos].isspace():
            pos += 1
        elif body.startswith("/*", pos):
            end = body.find("*/", pos)
            if end == -1:
                raise SourceError(OPTIONS_H + ": unclosed comment in " + MACRO)
            comment = squash(body[pos + 2:end])
            pos = end + 2
        elif body.startswith("_(", pos):
            inner, pos = balanced_call(body, pos + 1)
            args = split_top_level(squash(inner))
            if len(args) != 3:
                raise SourceError(
                    "%s: %s entry '%s' is not _(type, name, default)"
                    % (OPTIONS_H, MACRO, squash(inner)))
            if not comment:
                raise SourceError("%s: %s entry %s has no /* comment */"
                                  % (OPTIONS_H, MACRO, args[1]))
            entries.append((args[0], args[1], args[2], comment))
            comment = None
        else:
            raise SourceError("%s: unexpected text in %s: %r"
                              % (OPTIONS_H, MACRO, body[pos:pos + 40]))
    if not entries:
        raise SourceError(OPTIONS_H + ": " + MACRO + " has no entries")
    return entries


def struct_fields(header):
    """(type, name, comment) of AcceleratorOptions' own TORCH_ARG fields."""
    match = re.search(r"\nstruct AcceleratorOptions \{\n", header)
    if not match:
        raise SourceError(OPTIONS_H + ": no 'struct AcceleratorOptions {'")
    fields, comment, in_define = [], [], False
    for line in header[match.end():].splitlines():
        stripped = line.strip()
        if in_define or stripped.startswith("#"):
            in_define = stripped.endswith("\\")
            comment = []
            continue
        if stripped == "};":
            break
        if stripped.startswith("///"):
            comment.append(stripped[3:].strip())
            continue
        field = re.match(r"TORCH_ARG\((.*)\);$", stripped)
        if field:
            args = split_top_level(field.group(1))
            if len(args) != 2:
                raise SourceError("%s: TORCH_ARG(%s) is not (type, name)"
                                  % (OPTIONS_H, field.group(1)))
            fields.append((args[0], args[1], squash(" ".join(comment))))
        comment = []
    if not fields:
        raise SourceError(OPTIONS_H + ": AcceleratorOptions has no TORCH_ARG")
    return fields


def resolved_from_environment(source, constants):
    """name -> (variable names, fallback) from options.cpp's pick() calls."""
    picks = {}
    for match in re.finditer(r"\bpick\(", source):
        inner, _ = balanced_call(source, match.end() - 1)
        args = split_top_level(squash(inner))
        option = re.fullmatch(r"options\.(\w+)\(\)", args[0])
        if not option or len(args) < 4 or args[1] != "env":
            continue  # the template's own definition, or another shape
        names = re.fullmatch(r"\{(.*)\}", args[2])
        if not names:
            raise SourceError("%s: pick(%s, ...): no {variables} list"
                              % (OPTIONS_CPP, args[0]))
        variables = []
        for constant in filter(None, split_top_level(names.group(1))):
            if constant not in constants:
                raise SourceError("%s: %s is not a kEnv constant of %s"
                                  % (OPTIONS_CPP, constant, OPTIONS_H))
            variables.append(constants[constant])
        picks[option.group(1)] = (variables, args[-1])
    if not picks:
        raise SourceError(OPTIONS_CPP + ": no pick(options.X(), env, ...)")
    used = {v for variables, _ in picks.values() for v in variables}
    unused = sorted(set(constants.values()) - used)
    if unused:
        raise SourceError(
            "%s declares %s, but no pick() in %s reads it: teach this "
            "script where it goes" % (OPTIONS_H, ", ".join(unused),
                                      OPTIONS_CPP))
    return picks


def dist_default(expression):
    """dist::SyncOptions().bucket_cap_mb() -> the member's initialiser."""
    match = re.fullmatch(r"dist::(\w+)\(\)\.(\w+)\(\)", expression)
    if not match:
        return None
    cls, member = match.groups()
    for header in sorted((ROOT / DIST_HEADERS).glob("*.h")):
        text = header.read_text()
        start = re.search(r"\b(?:class|struct)\s+%s\s*\{" % cls, text)
        if not start:
            continue
        end = text.find("\n};", start.end())
        # A declaration (a type before the name), not a setter's assignment.
        init = re.search(r"^\s*[\w:<>]+\s+%s_\s*=\s*([^;]+);" % member,
                         text[start.end():end], re.M)
        if init:
            return squash(init.group(1))
    raise SourceError("%s: no %s::%s_ initialiser in %s"
                      % (expression, cls, member, DIST_HEADERS))


def format_default(expression):
    expression = squash(expression)
    resolved = dist_default(expression)
    if resolved is not None:
        return "`%s` (`%s`)" % (resolved, expression)
    expression = re.sub(r"^Precision::(\w+)$", r"\1", expression)
    expression = re.sub(r"^u?int\d+_t\{(.*)\}$", r"\1", expression)
    expression = re.sub(r"^std::string\(\)$", '""', expression)
    return "`%s`" % expression


def cell(text):
    return text.replace("|", "\\|")


def prose(text):
    """A comment as a table cell: <step> would read as an HTML tag."""
    return cell(text.replace("<", "&lt;").replace(">", "&gt;"))


def render():
    header = (ROOT / OPTIONS_H).read_text()
    source = (ROOT / OPTIONS_CPP).read_text()
    constants = env_constants(header)
    picks = resolved_from_environment(source, constants)
    fields = struct_fields(header)
    names = {name for _, name, _ in fields}
    missing = sorted(set(picks) - names)
    if missing:
        raise SourceError("%s picks %s, which AcceleratorOptions lacks"
                          % (OPTIONS_CPP, ", ".join(missing)))
    out = [
        "# Accelerator options",
        "",
        "<!-- Generated by tools/gen_options_reference.py from %s and %s;"
        % (OPTIONS_H, OPTIONS_CPP),
        "     do not edit. Regenerate with:",
        "     /usr/bin/python3 tools/gen_options_reference.py > %s -->"
        % OUTPUT,
        "",
        "Every field of `ampkit::AcceleratorOptions`, set as a chained call:",
        "`ampkit::AcceleratorOptions().mixed_precision(\"bf16\").seed(0)`.",
        "The Accelerator prints the values it runs with, and where each came",
        "from, as a table at start-up (`quiet(true)` turns it off). See",
        "[the guide](../README.md) for what the options are for.",
        "",
        "## Resolved options",
        "",
        "An option left unset is taken, in this order, from the environment",
        "variables a launcher sets (`ampkit launch`, `accelerate launch`; the",
        "first one set wins), the config file (`ampkit config`), or the",
        "default.",
        "",
        "| option | type | default | environment variable(s) | description |",
        "|---|---|---|---|---|",
    ]
    for type_, name, comment in fields:
        variables, fallback = picks.get(name, ([], None))
        if fallback is not None:
            default = format_default(fallback)
        else:
            said = re.search(r"\bDefault ([^.]*)\.", comment)
            if said:
                default = said.group(1)
            elif type_.startswith("std::optional<"):
                default = "unset"
            else:
                default = "`%s()`" % type_
        env = ", ".join("`%s`" % v for v in variables) or "-"
        out.append("| `%s` | `%s` | %s | %s | %s |" % (
            name, type_, cell(default), env, prose(comment or "-")))
    out += [
        "",
        "## Plain options",
        "",
        "Taken as given (checked, not resolved): no environment variable or",
        "config key sets them. They come from the one list",
        "`%s` in `%s`." % (MACRO, OPTIONS_H),
        "",
        "| option | type | default | environment variable(s) | description |",
        "|---|---|---|---|---|",
    ]
    for type_, name, default, comment in plain_options(header):
        out.append("| `%s` | `%s` | %s | - | %s |" % (
            name, type_, cell(format_default(default)), prose(comment)))
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true",
        help="compare with %s instead of printing; exit 1 when it differs"
        % OUTPUT)
    args = parser.parse_args()
    try:
        text = render()
    except SourceError as e:
        print("gen_options_reference.py: %s" % e, file=sys.stderr)
        return 2
    if not args.check:
        sys.stdout.write(text)
        return 0
    path = ROOT / OUTPUT
    current = path.read_text() if path.exists() else ""
    if current == text:
        print("%s is up to date" % OUTPUT)
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        current.splitlines(True), text.splitlines(True),
        OUTPUT, "generated"))
    print("\n%s is out of date with %s. Regenerate it from the source root:\n"
          "  /usr/bin/python3 tools/gen_options_reference.py > %s"
          % (OUTPUT, OPTIONS_H, OUTPUT), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
