"""pb_utils.Tensor.to_dlpack / from_dlpack on CPU tensors, with numpy as the other framework.

Only the paths that Triton 2.51's stub supports with numpy: its from_dlpack takes a capsule made by
to_dlpack or an object whose __dlpack__ is a pb_utils.Tensor's (it crashes on numpy's own capsules)."""
import numpy as np
import triton_python_backend_utils as pb_utils


class _Capsule:
    """Hands a DLPack capsule to np.from_dlpack, which takes objects with __dlpack__, not capsules."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            y = pb_utils.get_input_tensor_by_name(request, "Y")
            text = pb_utils.get_input_tensor_by_name(request, "TEXT")
            if text is not None:
                text.to_dlpack()  # raises: DLPack has no string type
            x_out = pb_utils.Tensor.from_dlpack("X_OUT", x.to_dlpack())
            x2 = pb_utils.Tensor("X2", np.from_dlpack(_Capsule(x.to_dlpack())) * 2)
            y1 = pb_utils.Tensor("Y1", np.from_dlpack(y) + 1)
            y_out = pb_utils.Tensor.from_dlpack("Y_OUT", y1)
            responses.append(pb_utils.InferenceResponse([x_out, x2, y_out]))
        return responses
