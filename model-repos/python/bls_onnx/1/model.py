"""BLS to the ONNX model `simple`, which batches: the inputs gain a batch dimension of 1 on the way in
and lose it on the way out."""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.Tensor(n, pb_utils.get_input_tensor_by_name(request, n).as_numpy().reshape(1, 16))
                      for n in ("INPUT0", "INPUT1")]
            r = pb_utils.InferenceRequest(model_name="simple", requested_output_names=["OUTPUT0", "OUTPUT1"],
                                          inputs=inputs).exec()
            if r.has_error():
                responses.append(pb_utils.InferenceResponse(error=r.error()))
                continue
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor(n, pb_utils.get_output_tensor_by_name(r, n).as_numpy().reshape(16))
                for n in ("OUTPUT0", "OUTPUT1")]))
        return responses
