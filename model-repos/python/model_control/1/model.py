"""pb_utils.load_model / unload_model / is_model_ready."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            op = pb_utils.get_input_tensor_by_name(request, "OP").as_numpy()[0].decode()
            name = pb_utils.get_input_tensor_by_name(request, "NAME").as_numpy()[0].decode()
            try:
                if op == "load":
                    pb_utils.load_model(model_name=name)
                elif op == "unload":
                    pb_utils.unload_model(model_name=name)
                ready = pb_utils.is_model_ready(model_name=name)
            except pb_utils.TritonModelException as e:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("READY", np.array([ready], np.bool_))]))
        return responses
