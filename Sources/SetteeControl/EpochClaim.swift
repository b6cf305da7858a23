import SetteeClusterMap
import SetteeCore

/// An epoch this node claimed from a majority (`ClusterBrain.changeRequested`) for one config change: the change
/// is committed as the config `(epoch, rev + 1)` published by `claimant`, or not at all (ADR 0034, ADR 0039).
///
/// Invariants (checked by `staleness` in the brain, `ClusterBrain.changeCommitting`, with the store's order held right
/// before the commit; ADR 0130):
///   1. The claimant still holds its own promise of exactly `epoch`: it promised no later epoch, nor this one to
///      another candidate, since the majority granted it.
///   2. No config of `epoch` or later was adopted meanwhile: each change takes a fresh claim, so a change made
///      without a majority's fresh promise can never be ordered above one made with it.
public struct EpochClaim: Sendable, Hashable, CustomStringConvertible {
    public var epoch: Int64
    public var claimant: NodeID

    public init(epoch: Int64, claimant: NodeID) {
        self.epoch = epoch
        self.claimant = claimant
    }

    public var description: String { "epoch \(epoch) claimed by \(claimant)" }

    /// Why a change may no longer be committed in this claim, or nil. `promise` is the claimant's highest promise
    /// now, `current` the config it holds now.
    public func staleness(promise: EpochPromise?, current: ConfigStamp) -> String? {
        if promise != EpochPromise(epoch: epoch, candidate: claimant) {
            return "No quorum: cluster epoch \(epoch) was claimed by this node, but it promised "
                + "\(promise.map { "epoch \($0.epoch) to \($0.candidate)" } ?? "nothing") since; retry."
        }
        if current.epoch >= epoch {
            return
                "No quorum: a config of epoch \(current.epoch) arrived while this node claimed epoch \(epoch); retry."
        }
        return nil
    }
}
