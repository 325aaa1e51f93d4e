"""Upper-cases BYTES elements (as bytes: any binary content passes through) and returns their lengths."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            upper = np.array([t.upper() for t in text.reshape(-1)], dtype=np.object_).reshape(text.shape)
            lengths = np.array([len(t) for t in text.reshape(-1)], dtype=np.int32).reshape(text.shape)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("UPPER", upper),
                pb_utils.Tensor("LENGTH", lengths),
            ]))
        return responses
