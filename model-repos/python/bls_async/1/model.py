"""`async def execute` with concurrent async_exec() BLS requests, gathered with asyncio."""
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()

            def call(x, y):
                return pb_utils.InferenceRequest(
                    model_name="add_sub", requested_output_names=["OUTPUT0", "OUTPUT1"],
                    inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", y)]).async_exec()

            first, second = await asyncio.gather(call(a, b), call(b, a))
            for r in (first, second):
                if r.has_error():
                    raise pb_utils.TritonModelException(r.error().message())
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", pb_utils.get_output_tensor_by_name(first, "OUTPUT0").as_numpy()),
                pb_utils.Tensor("OUTPUT1", pb_utils.get_output_tensor_by_name(second, "OUTPUT1").as_numpy()),
            ]))
        return responses
