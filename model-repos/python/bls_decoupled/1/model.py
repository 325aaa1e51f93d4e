"""Iterates the responses of the decoupled model `repeat` through BLS."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            bls = pb_utils.InferenceRequest(model_name="repeat", requested_output_names=["OUT"],
                                            inputs=[pb_utils.get_input_tensor_by_name(request, "IN")])
            total, count = 0, 0
            for r in bls.exec(decoupled=True):
                if r.has_error():
                    raise pb_utils.TritonModelException(r.error().message())
                if r.output_tensors():
                    total += int(pb_utils.get_output_tensor_by_name(r, "OUT").as_numpy()[0])
                    count += 1
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", np.array([total], np.int32)),
                pb_utils.Tensor("COUNT", np.array([count], np.int32)),
            ]))
        return responses
