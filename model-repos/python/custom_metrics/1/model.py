"""pb_utils.MetricFamily / Metric: a counter, a gauge and a histogram, as Triton's custom_metrics example."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.requests_family = pb_utils.MetricFamily(
            name="example_requests_total", description="Requests this model executed",
            kind=pb_utils.MetricFamily.COUNTER)
        self.last_family = pb_utils.MetricFamily(
            name="example_last_input_sum", description="Sum of the last input", kind=pb_utils.MetricFamily.GAUGE)
        self.values_family = pb_utils.MetricFamily(
            name="example_input_values", description="Input values", kind=pb_utils.MetricFamily.HISTOGRAM)
        self.requests = self.requests_family.Metric(labels=labels)
        self.last = self.last_family.Metric(labels=labels)
        self.values = self.values_family.Metric(labels=labels, buckets=[1.0, 5.0, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            self.requests.increment(1)
            self.last.set(float(x.sum()))
            for v in x.reshape(-1):
                self.values.observe(float(v))
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("COUNT", np.array([self.requests.value()], np.float64))]))
        return responses
