#!/usr/bin/env python3
"""The shipped JSON Schemas (schemas/) against the bundled case files and against real reports of
run and merge and run --repro-dir's index, and the JUnit XML read back with a JUnit reader (Debian python3-jsonschema and
python3-junitparser; exit 77, a ctest skip, where they are missing).

Usage: validate_reports.py ATTNRES_CHECK SOURCE_DIR"""
import copy
import csv
import json
import pathlib
import subprocess
import sys
import tempfile

try:
    import jsonschema
    import junitparser
except ImportError as missing:
    print(f"skipped: {missing} (install python3-jsonschema and python3-junitparser)")
    sys.exit(77)

binary, source = sys.argv[1], pathlib.Path(sys.argv[2])
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


def validator(name):
    schema = json.loads((source / "schemas" / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


cases = validator("case.schema.json")
reports = validator("report.schema.json")
repro_indexes = validator("repro-dir.schema.json")

# Every bundled case file is valid, and so is the documented example; typical mistakes are not.
for path in sorted((source / "cases").rglob("*.json")):
    for error in cases.iter_errors(json.loads(path.read_text())):
        failures.append(f"{path}: {error.json_path}: {error.message}")
good = {"schema_version": 1, "name": "x", "T": 3, "H": 64, "max_blocks": 2, "num_blocks": 2,
        "tensors": {"prefix": {"row_stride": 71, "dist": {"kind": "uniform", "low": -2, "high": 2}}},
        "expect": {"verdict": "reject", "message": "m"}}
check(cases.is_valid(good), "a valid case fails the case schema")
views = copy.deepcopy(good)
views["tensors"] = {"prefix": {"stride": [65, 1], "storage_offset": 1}, "blocks": {"stride": [64, 192, 1]},
                    "qk_weight": {"storage_offset": 3, "stride": [1]}, "output": {"row_padding": 8, "storage_offset": 8}}
check(cases.is_valid(views), "a case of views fails the case schema")
for change in [{"H": 7}, {"T": -1}, {"name": "a b"}, {"kernel": "fast"}, {"typo": 1}, {"schema_version": 2},
               {"tensors": {"prefix": {"row_stride": 71, "row_padding": 7}}},
               {"tensors": {"prefix": {"dist": {"kind": "normal", "low": 0}}}},
               {"expect": {"verdict": "pass", "message": "m"}}, {"eps": -1},
               {"tensors": {"prefix": {"stride": [64, 2]}}}, {"tensors": {"prefix": {"stride": [71, 1], "row_stride": 71}}},
               {"tensors": {"blocks": {"stride": [64, 1]}}}, {"tensors": {"delta": {"storage_offset": -1}}},
               {"tensors": {"norm_weight": {"row_stride": 64}}}]:
    bad = copy.deepcopy(good)
    bad.update(change)
    check(not cases.is_valid(bad), f"the case schema accepts {change}")

with tempfile.TemporaryDirectory() as work:
    work = pathlib.Path(work)
    # A run with every kind of outcome: passes, expected rejections, and the seed bug unguarded.
    runs = {"run": ["run", str(source / "cases/guard.json"), str(source / "cases/public.json"), "--filter", "*t3-*",
                    "--filter", "seed*"],
            "unguarded": ["run", str(source / "cases/guard.json"), "--no-layout-guard"],
            "checked": ["run", str(source / "cases/public.json"), "--filter", "*t3-*", "--check", "all"]}
    for name, args in runs.items():
        subprocess.run([binary, *args, "--backend", "cpu", "--json", str(work / f"{name}.json"),
                        "--junit", str(work / f"{name}.xml"), "--csv", str(work / f"{name}.csv")], capture_output=True,
                       check=False)
    for shard in (1, 2):
        subprocess.run([binary, *runs["run"], "--backend", "cpu", "--shard", f"{shard}/2", "--json",
                        str(work / f"shard{shard}.json")], capture_output=True, check=False)
    subprocess.run([binary, "merge", str(work / "shard1.json"), str(work / "shard2.json"), "--json", str(work / "merged.json"),
                    "--junit", str(work / "merged.xml"), "--csv", str(work / "merged.csv")], capture_output=True, check=False)

    for name in ("run", "unguarded", "checked", "merged"):
        report = json.loads((work / f"{name}.json").read_text())
        for error in reports.iter_errors(report):
            failures.append(f"{name}.json: {error.json_path}: {error.message}")
        check(report["summary"]["total"] == len(report["cases"]), f"{name}.json: summary total")

        # CSV read back with Python's reader: a row per case with the JSON's values.
        with open(work / f"{name}.csv", newline="", encoding="utf-8") as table:
            rows = list(csv.DictReader(table))
        check(len(rows) == len(report["cases"]), f"{name}.csv: {len(rows)} rows for {len(report['cases'])} cases")
        for row, case in zip(rows, report["cases"]):
            same = row["name"] == case["name"] and row["disposition"] == case["disposition"] and \
                row["detail"] == case["detail"] and int(row["seed"]) == case["seed"]
            if case["comparison"]:
                same = same and int(row["mismatched"]) == case["comparison"]["mismatched"]
            check(same, f"{name}.csv: row {row} differs from the JSON's {case['name']}")

        # JUnit read back: one suite per case file, every case a test and each of its checked
        # properties one more, failures and errors as the JSON has them, the run's properties on each suite.
        xml = junitparser.JUnitXml.fromfile(str(work / f"{name}.xml"))
        suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
        tests = [test for suite in suites for test in suite]
        expected = sum(1 + len(c["properties"]) for c in report["cases"])
        check(len(tests) == expected, f"{name}.xml: {len(tests)} tests for {expected} cases and properties")
        check(name != "checked" or all(len(c["properties"]) == 6 for c in report["cases"]),
              f"{name}.json: a case without its six properties")
        unmet = sum(1 for c in report["cases"] if not c["meets_expectation"] and c["disposition"] not in ("not-run", "error"))
        unmet += sum(1 for c in report["cases"] for p in c["properties"] if p["disposition"] == "failed")
        failed = sum(1 for t in tests for r in t.result if isinstance(r, junitparser.Failure))
        check(failed == unmet, f"{name}.xml: {failed} failures, the JSON has {unmet} unmet cases")
        for suite in suites:
            properties = {p.name: p.value for p in suite.properties()}
            check(properties.get("backend") == "cpu", f"{name}.xml: suite {suite.name} properties {properties}")
            check("tool_version" in properties and "git_revision" in properties, f"{name}.xml: suite {suite.name} properties")
            check(suite.timestamp is not None and suite.hostname, f"{name}.xml: suite {suite.name} has no timestamp/hostname")
    # run --repro-dir's index: bundles written, and over the byte budget, cases listed instead.
    small = [str(source / "cases/guard.json"), "--filter", "guard-delta*", "--filter", "guard-output*",
             "--no-layout-guard", "--backend", "cpu"]
    subprocess.run([binary, "run", *small, "--repro-dir", str(work / "repro")], capture_output=True, check=False)
    subprocess.run([binary, "run", *small, "--repro-dir", str(work / "listed"), "--repro-max-bytes", "1M"],
                   capture_output=True, check=False)
    for name, key in (("repro", "bundles"), ("listed", "left_out")):
        index = json.loads((work / name / "index.json").read_text())
        for error in repro_indexes.iter_errors(index):
            failures.append(f"{name}/index.json: {error.json_path}: {error.message}")
        check(len(index[key]) == 2, f"{name}/index.json: {len(index[key])} {key}, expected 2")
    unguarded = json.loads((work / "unguarded.json").read_text())
    check(any(c["disposition"] == "not-rejected" for c in unguarded["cases"]), "the unguarded seed repro was not caught")

for failure in failures:
    print("FAIL:", failure)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
