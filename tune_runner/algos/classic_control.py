"""gymnasium 1.x's classic control envs as torch envs (tune_runner.algos.torch_envs): CartPole-v1, Acrobot-v1,
MountainCar-v0, MountainCarContinuous-v0 and Pendulum-v1.

Each step is gymnasium's code op for op on float64 tensors, in the same order, with its float32 roundings where
gymnasium computes in float32 (Acrobot's start state, Pendulum's torque terms, MountainCarContinuous's state after
a step); its reset ranges, termination, rewards and its TimeLimit's `max_episode_steps`. What differs is the reset
noise (hashed, torch_envs) and the last bit of a sin or cos (torch's, not libm's);
tests/test_torch_envs.py holds each to gymnasium over 10,000 random actions.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from tune_runner.algos.torch_envs import TorchVectorEnv, f32


def _uniform(u: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """numpy's Generator.uniform(low, high) of uniforms u: low + (high - low) * u."""
    return low + (high - low) * u


def _f32(x: float) -> float:
    """A Python float as numpy turns it into float32 where it meets a float32 scalar."""
    return float(np.float32(x))


def _threshold(single: torch.Tensor, value: float) -> torch.Tensor:
    """`value` as each env's comparison meets it: float32 where `single` (a numpy float32 scalar), else float64."""
    return torch.full_like(single, value, dtype=torch.float64).where(~single, _f32(value))


class CartPole(TorchVectorEnv):
    """CartPole-v1 (CartPoleEnv and CartPoleVectorEnv, Euler integration); `sutton_barto_reward` as gymnasium's."""

    state_size, draws, max_episode_steps = 4, 4, 500
    settings = ("sutton_barto_reward",)
    sutton_barto_reward = False
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold_radians, x_threshold = 12 * 2 * math.pi / 360, 2.4
    high = np.array([x_threshold * 2, np.inf, theta_threshold_radians * 2, np.inf], dtype=np.float32)
    single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
    single_action_space = gym.spaces.Discrete(2)

    def start(self, uniforms: torch.Tensor) -> torch.Tensor:
        return _uniform(uniforms, -0.05, 0.05)

    def dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        x, x_dot, theta, theta_dot = state.unbind(1)
        force = torch.where(actions == 1, self.force_mag, -self.force_mag).to(torch.float64)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * (costheta * costheta) / total_mass))
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        terminated = (x < -self.x_threshold) | (x > self.x_threshold) | (theta < -self.theta_threshold_radians) | (
            theta > self.theta_threshold_radians)
        reward = -terminated.double() if self.sutton_barto_reward else torch.ones_like(x)
        return torch.stack((x, x_dot, theta, theta_dot), 1), reward, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.float()


class Acrobot(TorchVectorEnv):
    """Acrobot-v1 ("book" dynamics, no torque noise): rk4 over dt, angles wrapped, velocities bounded."""

    state_size, draws, max_episode_steps = 4, 4, 500
    dt = 0.2
    LINK_LENGTH_1, LINK_MASS_1, LINK_MASS_2, LINK_COM_POS_1, LINK_COM_POS_2, LINK_MOI = 1.0, 1.0, 1.0, 0.5, 0.5, 1.0
    MAX_VEL_1, MAX_VEL_2 = 4 * math.pi, 9 * math.pi
    AVAIL_TORQUE = (-1.0, 0.0, 1.0)
    high = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)
    single_observation_space = gym.spaces.Box(low=-high, high=high, dtype=np.float32)
    single_action_space = gym.spaces.Discrete(3)

    def start(self, uniforms: torch.Tensor) -> torch.Tensor:
        return f32(_uniform(uniforms, -0.1, 0.1))  # gymnasium keeps it as float32

    def _dsdt(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        m1, m2, l1 = self.LINK_MASS_1, self.LINK_MASS_2, self.LINK_LENGTH_1
        lc1, lc2, I1, I2, g = self.LINK_COM_POS_1, self.LINK_COM_POS_2, self.LINK_MOI, self.LINK_MOI, 9.8
        theta1, theta2, dtheta1, dtheta2 = s.unbind(1)
        cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + I2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta2**2 * sin2 - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
                + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2) + phi2)
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin2 - phi2) / (m2 * lc2**2 + I2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), 1)

    def dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        torque = torch.tensor(self.AVAIL_TORQUE, dtype=torch.float64, device=state.device)[actions]
        dt = self.dt
        dt2 = dt / 2.0
        k1 = self._dsdt(state, torque)
        k2 = self._dsdt(state + dt2 * k1, torque)
        k3 = self._dsdt(state + dt2 * k2, torque)
        k4 = self._dsdt(state + dt * k3, torque)
        ns = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        angles = ns[:, :2]
        for _ in range(2):  # gymnasium's wrap: a while loop of whole turns; a step moves less than two
            angles = torch.where(angles > math.pi, angles - 2 * math.pi, angles)
            angles = torch.where(angles < -math.pi, angles + 2 * math.pi, angles)
        ns = torch.cat([angles, ns[:, 2:3].clamp(-self.MAX_VEL_1, self.MAX_VEL_1),
                        ns[:, 3:4].clamp(-self.MAX_VEL_2, self.MAX_VEL_2)], 1)
        terminated = -torch.cos(ns[:, 0]) - torch.cos(ns[:, 1] + ns[:, 0]) > 1.0
        return ns, torch.where(terminated, 0.0, -1.0), terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        s0, s1 = state[:, 0], state[:, 1]
        return torch.stack((torch.cos(s0), torch.sin(s0), torch.cos(s1), torch.sin(s1), state[:, 2], state[:, 3]),
                           1).float()


class MountainCar(TorchVectorEnv):
    """MountainCar-v0; `goal_velocity` as gymnasium's."""

    state_size, draws, max_episode_steps = 2, 1, 200
    settings = ("goal_velocity",)
    min_position, max_position, max_speed, goal_position, goal_velocity = -1.2, 0.6, 0.07, 0.5, 0
    force, gravity = 0.001, 0.0025
    single_observation_space = gym.spaces.Box(np.array([min_position, -max_speed], dtype=np.float32),
                                              np.array([max_position, max_speed], dtype=np.float32), dtype=np.float32)
    single_action_space = gym.spaces.Discrete(3)

    def start(self, uniforms: torch.Tensor) -> torch.Tensor:
        return torch.cat([_uniform(uniforms, -0.6, -0.4), torch.zeros_like(uniforms)], -1)

    def dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        position, velocity = state.unbind(1)
        velocity = velocity + ((actions - 1).double() * self.force + torch.cos(3 * position) * -self.gravity)
        velocity = velocity.clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        return torch.stack((position, velocity), 1), torch.full_like(position, -1.0), terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.float()


class MountainCarContinuous(TorchVectorEnv):
    """MountainCarContinuous-v0; `goal_velocity` as gymnasium's. gymnasium keeps the state as float32 after the
    first step (its reset's is float64), so a step after that compares and rounds as numpy's float32 scalars do."""

    state_size, draws, max_episode_steps = 2, 1, 999
    settings = ("goal_velocity",)
    min_action, max_action, min_position, max_position, max_speed = -1.0, 1.0, -1.2, 0.6, 0.07
    goal_position, goal_velocity, power = 0.45, 0, 0.0015
    single_observation_space = gym.spaces.Box(np.array([min_position, -max_speed], dtype=np.float32),
                                              np.array([max_position, max_speed], dtype=np.float32), dtype=np.float32)
    single_action_space = gym.spaces.Box(low=min_action, high=max_action, shape=(1,), dtype=np.float32)

    def start(self, uniforms: torch.Tensor) -> torch.Tensor:
        return torch.cat([_uniform(uniforms, -0.6, -0.4), torch.zeros_like(uniforms)], -1)

    def dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        single = self.elapsed > 0  # the state is numpy float32: Python floats meet it as float32
        position, velocity = state.unbind(1)
        action = actions[:, 0].double()
        force = action.clamp(self.min_action, self.max_action)
        clipped = force != action  # min/max returned the Python float: this step's sum is float64
        cos = 0.0025 * torch.cos(torch.where(single, f32(3 * position), 3 * position))
        change = torch.where(clipped, force * self.power - cos, f32(f32(force * _f32(self.power))
                                                                     - f32(cos)))
        velocity = torch.where(single, f32(velocity + f32(change)), velocity + change)
        velocity = torch.where(velocity > _threshold(single, self.max_speed), self.max_speed, velocity)
        velocity = torch.where(velocity < _threshold(single, -self.max_speed), -self.max_speed, velocity)
        position = torch.where(single, f32(position + f32(velocity)), position + velocity)
        at_max = position > _threshold(single, self.max_position)
        at_min = position < _threshold(single, self.min_position)
        position = torch.where(at_max, self.max_position, torch.where(at_min, self.min_position, position))
        on_min = at_min | (position == _threshold(single, self.min_position))
        velocity = torch.where(on_min & (velocity < 0), 0.0, velocity)
        goal = _threshold(single & ~at_max, self.goal_position)
        terminated = (position >= goal) & (velocity >= self.goal_velocity)
        reward = torch.where(terminated, 100.0, 0.0) - (action * action) * 0.1
        return f32(torch.stack((position, velocity), 1)), reward, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.float()


class Pendulum(TorchVectorEnv):
    """Pendulum-v1; `g` as gymnasium's. Never terminates; the time limit truncates."""

    state_size, draws, max_episode_steps = 2, 2, 200
    settings = ("g",)
    max_speed, max_torque, dt, g, m, l = 8, 2.0, 0.05, 10.0, 1.0, 1.0  # noqa: E741 - gymnasium's names
    high = np.array([1.0, 1.0, max_speed], dtype=np.float32)
    single_observation_space = gym.spaces.Box(low=-high, high=high, dtype=np.float32)
    single_action_space = gym.spaces.Box(low=-max_torque, high=max_torque, shape=(1,), dtype=np.float32)

    def start(self, uniforms: torch.Tensor) -> torch.Tensor:
        return torch.stack((_uniform(uniforms[..., 0], -np.pi, np.pi), _uniform(uniforms[..., 1], -1.0, 1.0)), -1)

    def dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        th, thdot = state.unbind(1)
        g, m, l, dt = self.g, self.m, self.l, self.dt  # noqa: E741
        u = actions[:, 0].clamp(-self.max_torque, self.max_torque)  # float32, as gymnasium's u
        normalized = torch.remainder(th + np.pi, 2 * np.pi) - np.pi
        costs = normalized**2 + 0.1 * thdot**2 + (0.001 * u**2).double()
        newthdot = thdot + (3 * g / (2 * l) * torch.sin(th) + (3.0 / (m * l**2) * u).double()) * dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        return torch.stack((newth, newthdot), 1), -costs, torch.zeros_like(th, dtype=torch.bool)

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        th, thdot = state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), 1).float()


CLASSIC_CONTROL: dict[str, type[TorchVectorEnv]] = {
    "CartPole-v1": CartPole, "Acrobot-v1": Acrobot, "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous, "Pendulum-v1": Pendulum}
