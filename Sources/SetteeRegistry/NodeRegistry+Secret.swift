import Logging
import SetteeAuth
import SetteeClusterMap
import SetteeControl
import SetteeCore
import Synchronization

/// The internal node secret: what nodes log in with to each other (HTTP Basic on the admin port, SCRAM on the KV
/// port, as `NodeRegistry.internalUsername`), and its rotation.
///
/// A rotation keeps the old value as `previousInternalSecret` until `previousInternalSecretUntil`. Until then
/// every node accepts both values and **sends the previous one**: a member that has not adopted the rotated
/// document yet knows only that one, and a member that has accepts both, so no call fails while the document
/// spreads. After the deadline nodes send the new value and refuse the old. A member that stays unreachable for
/// the whole grace period cannot talk to the cluster any more (as after any secret change) and must be re-added.
extension NodeRegistry {
    /// The user nodes authenticate as to each other, with the cluster's secret.
    public static let internalUsername = "@settee-internal"

    /// Credentials for node-to-node requests and replication logins: the previous secret during a rotation's
    /// grace period, the current one otherwise.
    public var internalCredentials: (username: String, password: String) {
        let now = nowSeconds
        let secret = snapshots.read { m -> String in
            if let previous = m.previousInternalSecret, let until = m.previousInternalSecretUntil, now < until {
                return previous
            }
            return m.internalSecret ?? ""
        }
        return (Self.internalUsername, secret)
    }

    /// The secrets a node accepts now: the current one, and the previous one during its grace period.
    func acceptedInternalSecrets() -> [String] {
        let now = nowSeconds
        return snapshots.read { m in
            var accepted: [String] = []
            if let current = m.internalSecret, !current.isEmpty { accepted.append(current) }
            if let previous = m.previousInternalSecret, !previous.isEmpty, let until = m.previousInternalSecretUntil,
                now < until
            {
                accepted.append(previous)
            }
            return accepted
        }
    }

    /// When the previous secret stops being accepted (Unix seconds), nil when none is.
    public var internalSecretGraceEnd: UInt64? {
        let now = nowSeconds
        return snapshots.read { m in
            guard m.previousInternalSecret != nil, let until = m.previousInternalSecretUntil,
                now < until
            else { return nil }
            return until
        }
    }

    var nowSeconds: UInt64 { clock.nowNanoseconds() / 1_000_000_000 }

    /// Replaces the secret in `metadata` by a random one, keeping the old value for `graceSeconds`.
    func rotateSecret(_ metadata: inout NodeMetadata, graceSeconds: Int) {
        metadata.previousInternalSecret = metadata.internalSecret
        let grace = UInt64(clamping: max(0, graceSeconds))
        let (until, overflow) = nowSeconds.addingReportingOverflow(grace)
        metadata.previousInternalSecretUntil = overflow ? UInt64.max : until
        metadata.internalSecret = RandomID.hex128()
    }

    /// Rotates the internal secret cluster-wide: a new random secret in a new cluster revision (the caller
    /// publishes it), the old one accepted for `graceSeconds` (0 refuses it at once). `claim`: the epoch the new
    /// config is committed in (`takeRevision`). Blocking (fsync).
    public func rotateInternalSecret(
        graceSeconds: Int = Limits.internalSecretGraceSeconds, claim: EpochClaim? = nil
    ) throws {
        try mutations.withLock { _ in
            try checkRunning()
            var m = snapshots.metadata
            rotateSecret(&m, graceSeconds: graceSeconds)
            try takeRevision(&m, claim: claim)
            try commit(m)
        }
        logger.notice("internal node secret rotated", metadata: ["graceSeconds": "\(graceSeconds)"])
        notify(nil)
    }

    /// SCRAM keys of the internal user for `hash`, and the previous secret's keys during the grace period (same
    /// salt, so one challenge serves both). Derived once per secret and hash (PBKDF2), then cached; the cache
    /// holds only secrets still accepted.
    func internalScramKeys(hash: ScramHash) -> (keys: ScramKeys, alsoAccept: [ScramKeys])? {
        credentials.internalScramKeys(accepted: acceptedInternalSecrets(), hash: hash)
    }
}
