"""ctypes bindings of the simulated CANN runtime, for scripts that call acl / aclnn directly.

Loads the libraries by soname, so it works both ways CANN can be found (LD_LIBRARY_PATH, or
libraries already loaded with RTLD_GLOBAL). numpy only: bfloat16 travels as uint16 bit patterns."""

from __future__ import annotations

import ctypes
import json
from ctypes import POINTER, byref, c_bool, c_char_p, c_double, c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p

import numpy as np

ACL_FLOAT, ACL_FLOAT16, ACL_INT32, ACL_INT64, ACL_DOUBLE, ACL_BF16 = 0, 1, 3, 9, 11, 27
ACL_FORMAT_ND = 2
H2D, D2H, D2D = 1, 2, 3
# dtype name -> (aclDataType, numpy dtype holding its bits)
DTYPES = {"float32": (ACL_FLOAT, np.float32), "float16": (ACL_FLOAT16, np.float16), "bfloat16": (ACL_BF16, np.uint16),
          "float64": (ACL_DOUBLE, np.float64), "int32": (ACL_INT32, np.int32), "int64": (ACL_INT64, np.int64)}

T = c_void_p  # aclTensor*
_P = POINTER(c_uint64), POINTER(c_void_p)  # workspaceSize, executor
SIGNATURES = {
    "aclnnSiluBackwardGetWorkspaceSize": (T, T, T, *_P),
    "aclnnMishBackwardGetWorkspaceSize": (T, T, T, *_P),
    "aclnnGroupNormSwishGradGetWorkspaceSize": (T, T, T, T, T, T, c_int64, c_char_p, c_double, c_bool, c_bool, T, T, T, *_P),
    "aclnnGroupNormSwishGetWorkspaceSize": (T, T, T, c_int64, c_char_p, c_double, c_bool, c_double, T, T, T, *_P),
}
LAUNCH = (c_void_p, c_uint64, c_void_p, c_void_p)


class AclError(RuntimeError):
    pass


class Acl:
    """aclInit, device 0, one stream; device buffers, tensors and two-phase aclnn calls."""

    def __init__(self):
        self.acl = ctypes.CDLL("libascendcl.so")
        self.nn = ctypes.CDLL("libnnopbase.so")
        self.op = ctypes.CDLL("libopapi.so")
        a = self.acl
        a.aclGetRecentErrMsg.restype = c_char_p
        a.simcann_report.restype = c_char_p
        a.aclrtMalloc.argtypes = (POINTER(c_void_p), c_size_t, c_int)
        a.aclrtFree.argtypes = (c_void_p,)
        a.aclrtMemcpy.argtypes = (c_void_p, c_size_t, c_void_p, c_size_t, c_int)
        a.aclrtCreateStream.argtypes = (POINTER(c_void_p),)
        a.aclrtDestroyStream.argtypes = (c_void_p,)
        self.nn.aclCreateTensor.restype = c_void_p
        self.nn.aclCreateTensor.argtypes = (POINTER(c_int64), c_uint64, c_int, POINTER(c_int64), c_int64, c_int,
                                            POINTER(c_int64), c_uint64, c_void_p)
        self.nn.aclDestroyTensor.argtypes = (c_void_p,)
        self.nn.aclDestroyTensor.restype = c_int32
        for name, args in SIGNATURES.items():
            getattr(self.op, name).argtypes = args
            getattr(self.op, name).restype = c_int32
            launch = getattr(self.op, name.removesuffix("GetWorkspaceSize"))
            launch.argtypes = LAUNCH
            launch.restype = c_int32
        self.check(a.aclInit(None), "aclInit")
        self.check(a.aclrtSetDevice(0), "aclrtSetDevice")
        self.stream = self.create_stream()

    def close(self):
        """Destroys the stream (a run that leaves it behind is not clean)."""
        self.check(self.acl.aclrtDestroyStream(self.stream), "aclrtDestroyStream")

    def error(self) -> str | None:
        msg = self.acl.aclGetRecentErrMsg()
        return msg.decode() if msg else None

    def check(self, code: int, what: str):
        if code:
            raise AclError(f"{what} returned {code}: {self.error()}")

    def report(self) -> dict:
        return json.loads(self.acl.simcann_report())

    def create_stream(self) -> int:
        s = c_void_p()
        self.check(self.acl.aclrtCreateStream(byref(s)), "aclrtCreateStream")
        return s.value

    def malloc(self, nbytes: int) -> int:
        p = c_void_p()
        self.check(self.acl.aclrtMalloc(byref(p), max(int(nbytes), 1), 0), "aclrtMalloc")
        return p.value

    def free(self, ptr: int):
        self.check(self.acl.aclrtFree(ptr), "aclrtFree")

    def upload(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        ptr = self.malloc(array.nbytes)
        if array.nbytes:
            self.check(self.acl.aclrtMemcpy(ptr, array.nbytes, array.ctypes.data, array.nbytes, H2D), "aclrtMemcpy")
        return ptr

    def download(self, ptr: int, shape, np_dtype) -> np.ndarray:
        out = np.empty(shape, np_dtype)
        if out.nbytes:
            self.check(self.acl.aclrtMemcpy(out.ctypes.data, out.nbytes, ptr, out.nbytes, D2H), "aclrtMemcpy")
        return out

    def tensor(self, ptr: int | None, shape, dtype: str, strides=None, offset: int = 0) -> int | None:
        """A contiguous (or strided) ND aclTensor over ptr; dtype a DTYPES name."""
        shape = [int(d) for d in shape]
        if strides is None:
            strides, s = [0] * len(shape), 1
            for i in range(len(shape) - 1, -1, -1):
                strides[i], s = s, s * shape[i]
        dims = (c_int64 * max(len(shape), 1))(*shape)
        st = (c_int64 * max(len(shape), 1))(*strides)
        t = self.nn.aclCreateTensor(dims, len(shape), DTYPES[dtype][0], st, offset, ACL_FORMAT_ND, dims, len(shape), ptr)
        if not t:
            raise AclError(f"aclCreateTensor failed: {self.error()}")
        return t

    def destroy(self, *tensors):
        for t in tensors:
            self.check(self.nn.aclDestroyTensor(t), "aclDestroyTensor")

    def workspace_size(self, op: str, *args) -> tuple[int, int, int]:
        """-> (status, workspace size, executor) of aclnn<op>GetWorkspaceSize."""
        ws, ex = c_uint64(), c_void_p()
        status = getattr(self.op, f"aclnn{op}GetWorkspaceSize")(*args, byref(ws), byref(ex))
        return status, ws.value, ex.value

    def launch(self, op: str, workspace: int | None, size: int, executor: int, stream: int | None = None) -> int:
        return getattr(self.op, f"aclnn{op}")(workspace, size, executor, self.stream if stream is None else stream)

    def call(self, op: str, *args) -> tuple[int, str | None]:
        """Both phases with a device workspace of the size asked for: -> (status, error message)."""
        status, size, executor = self.workspace_size(op, *args)
        if status:
            return status, self.error()
        workspace = self.malloc(size) if size else None
        try:
            status = self.launch(op, workspace, size, executor)
            return status, self.error() if status else None
        finally:
            if workspace:
                self.free(workspace)
