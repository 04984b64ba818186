"""The tests that take longer than a threshold, for tests/slow_tests.txt.

    python -m pytest --junitxml=/tmp/junit.xml
    python tests/list_slow.py /tmp/junit.xml [--seconds 0.05] > tests/slow_tests.txt

A test function is listed (all its parameters together) when any of its
cases took longer than the threshold; tests/conftest.py marks the listed
ones ``slow``, so that ``python -m pytest -m "not slow"`` is the fast
subset.
"""

import argparse
import xml.etree.ElementTree as ET


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", help="a pytest --junitxml report of the whole run")
    parser.add_argument("--seconds", type=float, default=0.05)
    args = parser.parse_args()
    slow = set()
    for case in ET.parse(args.junit).iter("testcase"):
        if float(case.get("time", 0)) > args.seconds:
            path = case.get("classname").replace(".", "/") + ".py"
            slow.add(f"{path}::{case.get('name').split('[')[0]}")
    print(f"# tests with a case over {args.seconds} s (tests/list_slow.py writes this list)")
    print(*sorted(slow), sep="\n")


if __name__ == "__main__":
    main()
