"""stable-baselines3 drives :class:`~kosmos_env.policies.checkpoint` 's network, not a copy of it.

:class:`KosmosActorCritic` is an ``ActorCriticPolicy`` whose features extractor owns one
``PolicyNet`` and whose ``mlp_extractor``, ``action_net``, ``value_net`` and ``log_std`` ARE that
network's submodules and parameter. PPO therefore optimises exactly the tensors a checkpoint
holds: behaviour-cloned weights load into it unchanged and the trained ones export unchanged
(``policy.net``), so a ``ckpt:`` policy acts as ``model.predict(obs, deterministic=True)`` does.
"""

from __future__ import annotations

from typing import Any, Mapping

from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from kosmos_env.policies.checkpoint import NetConfig, build_net


class KosmosFeatures(BaseFeaturesExtractor):
    """The network's shared encoder (CNN + normalised state + task one-hot).

    stable-baselines3 hands it the image channel-first and divided by 255 (``VecTransposeImage``
    and ``preprocess_obs``), the layout ``PolicyNet.encode`` reads.
    """

    def __init__(self, observation_space, net_config: Mapping[str, Any]):
        net = build_net(NetConfig.from_dict(net_config))
        super().__init__(observation_space, features_dim=net.features_dim)
        self.net = net

    def forward(self, observations):
        return self.net.encode(observations["image"], observations["state"], observations["task"])


class _Trunks(nn.Module):
    """The actor and critic trunks of the network, in the shape SB3 expects of an ``mlp_extractor``."""

    def __init__(self, net):
        super().__init__()
        self.pi, self.vf = net.pi_trunk, net.vf_trunk
        last = net.cfg.hidden[-1] if net.cfg.hidden else net.features_dim
        self.latent_dim_pi = self.latent_dim_vf = last

    def forward(self, features):
        return self.pi(features), self.vf(features)

    def forward_actor(self, features):
        return self.pi(features)

    def forward_critic(self, features):
        return self.vf(features)


class KosmosActorCritic(ActorCriticPolicy):
    """PPO's policy over the ``image``/``state``/``task`` Dict of ``kosmos_env.wrappers``.

    ``policy_kwargs={"net_config": NetConfig(...).to_dict()}``. SB3's orthogonal
    re-initialisation is off: the weights come from behaviour cloning (or the network's own init).
    """

    def __init__(self, observation_space, action_space, lr_schedule, net_config: Mapping[str, Any], **kwargs):
        kwargs.update(
            features_extractor_class=KosmosFeatures,
            features_extractor_kwargs={"net_config": dict(net_config)},
            ortho_init=False,
            share_features_extractor=True,
            net_arch=[],
            log_std_init=float(NetConfig.from_dict(net_config).init_log_std),
        )
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    @property
    def net(self):
        """The ``PolicyNet`` whose tensors PPO trains (what a checkpoint saves)."""
        return self.features_extractor.net

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = _Trunks(self.features_extractor.net)

    def _build(self, lr_schedule) -> None:
        super()._build(lr_schedule)
        net = self.features_extractor.net
        # replace SB3's freshly made heads with the network's own, then rebuild the optimiser so
        # it holds exactly the network's parameters (shared ones are counted once)
        self.action_net = net.mean_head
        self.value_net = net.value_head
        self.log_std = net.log_std
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)
