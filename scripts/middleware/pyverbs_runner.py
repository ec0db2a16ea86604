"""Runs rdma-core's tests/ (pyverbs) the way its run_tests.py loads them,
printing one line per test and then the counts; used by
scripts/middleware/pyverbs.

usage: pyverbs_runner.py <tests dir> <device> [pattern ...]
A pattern keeps only the tests whose id contains it. Exit status 0 only if
at least one test ran and none failed or erred.
"""

import os
import sys
import time
import unittest
from importlib.machinery import SourceFileLoader

tests_dir, dev, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
# The suite's own modules import args_parser and tests.* from its folder.
sys.path.insert(0, tests_dir)
sys.argv = [sys.argv[0], "--dev", dev]
from args_parser import parser  # noqa: E402 (needs the path above)

parser.parse_args()
tests = SourceFileLoader("tests", os.path.join(tests_dir, "__init__.py")).load_module()
loader = unittest.TestLoader()
if patterns:
    loader.testNamePatterns = ["*%s*" % p for p in patterns]
suite = loader.loadTestsFromModule(tests)


class Lines(unittest.TextTestResult):
    """One line per test as it ends: its outcome, its id, a skip's reason."""

    def line(self, word, test, why=""):
        self.stream.write("%-5s %s%s\n" % (word, test.id(), "  (%s)" % why if why else ""))
        self.stream.flush()

    def addSuccess(self, test):
        unittest.TestResult.addSuccess(self, test)
        self.line("ok", test)

    def addFailure(self, test, err):
        unittest.TestResult.addFailure(self, test, err)
        self.line("FAIL", test)

    def addError(self, test, err):
        unittest.TestResult.addError(self, test, err)
        self.line("ERROR", test)

    def addSkip(self, test, reason):
        unittest.TestResult.addSkip(self, test, reason)
        self.line("skip", test, reason)

    def addExpectedFailure(self, test, err):
        unittest.TestResult.addExpectedFailure(self, test, err)
        self.line("xfail", test)

    def addUnexpectedSuccess(self, test):
        unittest.TestResult.addUnexpectedSuccess(self, test)
        self.line("XPASS", test)


t0 = time.time()
# Verbosity 0: the lines above, then the tracebacks of failures and errors.
r = unittest.TextTestRunner(stream=sys.stdout, resultclass=Lines, verbosity=0).run(suite)
failed = len(r.failures) + len(r.unexpectedSuccesses)
passed = r.testsRun - failed - len(r.errors) - len(r.skipped) - len(r.expectedFailures)
print(
    "pyverbs on %s: %d tests in %.0f s: passed %d, failed %d, errors %d, skipped %d"
    % (dev, r.testsRun, time.time() - t0, passed, failed, len(r.errors), len(r.skipped))
)
sys.exit(0 if r.wasSuccessful() and r.testsRun > 0 else 1)
