"""Blocking BLS: forwards the request to another model; its error, if any, becomes this response's."""
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "add_sub")
            bls = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1")])
            response = bls.exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
                continue
            responses.append(pb_utils.InferenceResponse([
                pb_utils.get_output_tensor_by_name(response, "OUTPUT0"),
                pb_utils.get_output_tensor_by_name(response, "OUTPUT1"),
            ]))
        return responses
