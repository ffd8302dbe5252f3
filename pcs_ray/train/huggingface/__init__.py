"""Ray Train's ``ray.train.huggingface`` under the same names: ``pcs_ray.train.huggingface.transformers``
(``RayTrainReportCallback``, ``prepare_trainer``). Importing this package imports no Hugging Face library."""
