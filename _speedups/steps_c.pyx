# cython: language_level=3
"""A coroutine's step, compiled. Twin of ``steps.py``.

``PyIter_Send`` (Python 3.10+) gives a finished coroutine's value back as a
result, not as a StopIteration raised, matched and caught. It uses
``am_send`` where the object has one (native coroutines, generators),
``__next__`` for ``send(None)`` to an iterator, and the ``send`` method
otherwise: what ``coro.send(value)`` does."""

from cpython.ref cimport PyObject, Py_DECREF


cdef extern from "Python.h":
    # -1: raised (the exception is set); 0: returned; 1: yielded.
    int PyIter_Send(object iter, object arg, PyObject **presult) except -1


def send(coro, value):
    cdef PyObject *result = NULL
    cdef int outcome = PyIter_Send(coro, value, &result)
    cdef object out = <object>result  # (takes a reference of its own)
    Py_DECREF(out)  # (the one PyIter_Send handed over)
    return (outcome == 0, out)
