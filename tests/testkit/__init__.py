"""Helpers shared by every test folder (imported as ``testkit``: ``tests/`` is on ``sys.path``
through ``tests/conftest.py``). Plain functions and classes; the fixtures built on them live in
``tests/conftest.py``.

- ``testkit.ports``: ``free_port()``, the one free-port helper.
- ``testkit.sandbox_servers``: the one way the tests start a sandbox server (a real
  ``python -m workbench.sandbox.launch_server`` process in its own process group), and the
  session cache behind the ``sandbox_server`` fixture.
- ``testkit.fast_guard``: what ``make test-fast`` refuses to start (servers, sshd, notebook
  kernels, browsers), so a test that starts one without being marked ``slow`` fails loudly.
- ``testkit.faults``: ``build_deployment(dest, *faults)``, faulty copies of the sandbox deployment
  (each fault by the engine's own mechanism, its public report named).
- ``testkit.matrix``: the fault matrix's rows (``CASES``), shared by the matrix test and
  ``benchmarks/bench_diagnose.py``; what a verdict decides (``signature``).
- ``testkit.cpuload``: a load that at least doubles every step's time: a CPU quota on the test's own
  process tree (cgroups), busy loops where no writable ``cpu`` controller exists.
- ``testkit.session_share``: results one test publishes for the others of the same session (across
  pytest-xdist workers), so that an end-to-end run two tests need runs once.
"""
