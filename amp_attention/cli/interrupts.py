"""Ctrl-C while a subcommand runs, and the environment checked before the scientific
stack is imported: :class:`InterruptGuard`, :func:`holds_interrupt`,
:func:`check_environment` (used by :func:`amp_attention.cli.main`)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from .common import CLIError


def holds_interrupt(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt or has one in its __cause__/__context__
    chain (or among the members of an exception group).  A Ctrl-C that lands in
    compiled (Numba) code surfaces as ``SystemError: CPUDispatcher(...) returned a result
    with an exception set`` caused by the KeyboardInterrupt."""
    import builtins

    groups = getattr(builtins, "BaseExceptionGroup", None)  # Python >= 3.11
    stack, seen = [exc], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return True
        stack += [e.__cause__, e.__context__]
        if groups is not None and isinstance(e, groups):
            stack += list(e.exceptions)
    return False


def _forget_unhandled_interrupt() -> None:
    """A KeyboardInterrupt that passed through ``exec`` of a string (dataclasses build
    their methods that way) sets CPython's _Py_UnhandledKeyboardInterrupt even when it is
    then handled, and ``python -m`` ends such a process by SIGINT (status -2) instead of
    with the exit code chosen: the CLI has handled it, clear the flag (CPython 3.10/3.11;
    a no-op where the symbol does not exist)."""
    if sys.implementation.name != "cpython":
        return
    try:
        import ctypes

        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0
    except (ImportError, AttributeError, ValueError, OSError):
        pass


class InterruptGuard:
    """Ctrl-C while a subcommand runs, wherever it lands (issue 29, item 4).

    Installed by :func:`amp_attention.cli.main` in place of Python's default SIGINT
    handler (only in the main thread, and only over the default handler).  The handler
    records the interrupt and raises KeyboardInterrupt as the default one does; then:

    * compiled (Numba) code hands it back as ``SystemError: ... returned a result with
      an exception set`` caused by the KeyboardInterrupt: :meth:`raising` turns any
      exception whose chain holds one (:func:`holds_interrupt`), or raised after an
      interrupt was received, into a KeyboardInterrupt;
    * code that swallows it (the init of a C extension module being imported, a
      weakref callback of the import lock, where Python prints "Exception ignored")
      would let the command run on: while the interrupt is not handled, it is sent
      again to the main thread every RESEND seconds, and the "Exception ignored"
      report of a KeyboardInterrupt is not printed -- neither through
      sys.unraisablehook nor through sys.excepthook, which Cython's noexcept functions
      call first to print the full traceback (scipy's Sobol initialisation is one).

    :meth:`stop` (when main handles it) turns the handler into a no-op; :meth:`uninstall`
    restores the previous handler.
    """

    RESEND = 0.5

    def __init__(self) -> None:
        import os
        import threading

        self.received = False
        #: the signal that ended the command: SIGINT (Ctrl-C), SIGTERM or SIGHUP
        self.signal_number: int | None = None
        self._stopped = False
        self._installed = False
        self._pid = os.getpid()
        self._done = threading.Event()
        self._resender: Any = None
        self._old_handler: Any = None
        self._old_terminate: dict = {}
        self._old_hook: Any = None
        self._old_excepthook: Any = None

    def install(self) -> "InterruptGuard":
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._old_handler = signal.signal(signal.SIGINT, self._handler)
        # SIGTERM / SIGHUP (kill, a closed terminal) end the command as Ctrl-C does:
        # worker pools shut down, finished points kept, one line; killed outright, the
        # process left its pools' semaphores to the resource tracker, which printed
        # "There appear to be 5 leaked semaphore objects" on stderr.  Also where SIGINT
        # is ignored (a background job of a non-interactive shell).
        for name in ("SIGTERM", "SIGHUP"):
            number = getattr(signal, name, None)
            if number is not None and signal.getsignal(number) is signal.SIG_DFL:
                self._old_terminate[number] = signal.signal(number, self._handler)
        if self._old_handler is not None or self._old_terminate:
            self._old_hook = sys.unraisablehook
            sys.unraisablehook = self._unraisable
            self._old_excepthook = sys.excepthook
            sys.excepthook = self._excepthook
            self._installed = True
        return self

    def _handler(self, signum, frame) -> None:
        import os
        import signal
        import threading

        if os.getpid() != self._pid:  # a forked worker: the default behaviour
            if signum != signal.SIGINT:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            raise KeyboardInterrupt
        if self._stopped:
            return
        if not self.received:
            self.received = True
            self.signal_number = signum
            if signum != signal.SIGINT:
                # as a terminal's Ctrl-C reaches the whole process group: the workers
                # of a local pool stop too, else the pool's shutdown waits on them
                import multiprocessing

                for child in multiprocessing.active_children():
                    with contextlib.suppress(OSError, TypeError):
                        os.kill(child.pid, signum)
            self._resender = threading.Thread(target=self._resend, daemon=True,
                                              name="amp-attention-interrupt")
            self._resender.start()
        raise KeyboardInterrupt

    def _resend(self) -> None:
        import signal
        import threading

        main = threading.main_thread().ident
        while not self._done.wait(self.RESEND):
            if hasattr(signal, "pthread_kill"):  # wakes a blocking call of the main thread
                signal.pthread_kill(main, self.signal_number or signal.SIGINT)
            else:  # pragma: no cover - not POSIX
                import _thread

                _thread.interrupt_main()

    def _unraisable(self, unraisable) -> None:
        if self.received and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return  # swallowed where it landed: _resend raises it again
        self._old_hook(unraisable)

    def _excepthook(self, exc_type, exc_value, tb) -> None:
        if self.received and isinstance(exc_value, KeyboardInterrupt):
            return  # printed by code that then swallows it: _resend raises it again
        self._old_excepthook(exc_type, exc_value, tb)

    @contextlib.contextmanager
    def raising(self):
        """Re-raise, as KeyboardInterrupt, an exception that holds one in its chain or
        that comes after an interrupt was received."""
        try:
            yield
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            if self.received or holds_interrupt(exc):
                raise KeyboardInterrupt from exc
            raise
        if self.received:  # swallowed, and the command finished before it came again
            raise KeyboardInterrupt

    def stop(self) -> None:
        """The interrupt is being handled: no more re-sending, the handler does nothing."""
        import threading

        self._stopped = True
        self._done.set()
        if self._resender is not None and self._resender is not threading.current_thread():
            self._resender.join()
        if self.received:
            _forget_unhandled_interrupt()

    def uninstall(self) -> None:
        import signal

        self.stop()
        if self._installed:
            self._installed = False
            # signal.signal first runs the handlers of pending signals (a last re-sent
            # one: the no-op), then restores the previous handler
            if self._old_handler is not None:
                signal.signal(signal.SIGINT, self._old_handler)
            for number, old in self._old_terminate.items():
                signal.signal(number, old)
            self._old_terminate = {}
            sys.unraisablehook = self._old_hook
            sys.excepthook = self._old_excepthook


def check_environment(environ=None) -> None:
    """The environment variables the CLI's libraries read at import, checked before any
    of them is imported: NUMBA_NUM_THREADS must be an integer >= 1 (Numba rejects 0 with a
    message that does not name it, and prints a traceback for a non-integer)."""
    import os

    environ = os.environ if environ is None else environ
    value = environ.get("NUMBA_NUM_THREADS")
    if value is None:
        return
    try:
        ok = int(value) >= 1  # Numba's own parse: int()
    except ValueError:
        ok = False
    if not ok:
        raise CLIError(f"environment variable NUMBA_NUM_THREADS must be an integer >= 1, "
                       f"got {value!r}")
