"""A Kosmos-Env plug-in world: replay a recorded episode, whatever the policy does.

Installing this package (``pip install examples/plugin_world``) adds, through entry points,

- the world type ``replay`` (group ``kosmos_env.worlds``): :class:`~kosmos_replay_world.world.ReplayWorld`;
- the env id ``KosmosReplay-BridgeReal-v1`` (group ``kosmos_env.envs``): the real Bridge episode
  shipped with Kosmos-Env played back open loop, on the Bridge task suite.

Nothing in Kosmos-Env changes: ``kosmos-env eval --env KosmosReplay-BridgeReal-v1 ...`` and
``gymnasium.make("KosmosReplay-BridgeReal-v1")`` find it once it is installed.
"""
