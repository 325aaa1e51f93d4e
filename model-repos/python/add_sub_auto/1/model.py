"""add_sub without a config.pbtxt: `auto_complete_config` declares the tensors, a batch size of 8 and
the dynamic batcher (Triton's python_backend auto_complete example, batching variant)."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                  {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}]
        outputs = [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                   {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}]
        config = auto_complete_model_config.as_dict()
        have_in = {i["name"] for i in config["input"]}
        have_out = {o["name"] for o in config["output"]}
        for i in inputs:
            if i["name"] not in have_in:
                auto_complete_model_config.add_input(i)
        for o in outputs:
            if o["name"] not in have_out:
                auto_complete_model_config.add_output(o)
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (a + b).astype(np.float32)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(np.float32)),
            ]))
        return responses
