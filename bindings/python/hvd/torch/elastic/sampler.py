"""hvd.torch.elastic.sampler: the public name of Horovod's
horovod.torch.elastic.sampler (``from hvd.torch.elastic.sampler import
ElasticSampler``), hvd.torch.elastic's own class."""

from ._sampler import ElasticSampler  # noqa: F401

__all__ = ["ElasticSampler"]
