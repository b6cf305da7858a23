import SetteeAuth
import SetteeCore
import SetteeTestSupport
import Synchronization
import Testing

@testable import SetteeRegistry

/// The internal node user's SCRAM keys and the rotation of its secret, on a registry with a manual clock.
@Suite struct ScramInternalUserTests {
    /// Runs a SCRAM-SHA512 exchange as the internal user with `password` against what `registry` serves.
    static func login(_ registry: NodeRegistry, password: String) -> Bool {
        var client = SaslClientLogin(
            username: NodeRegistry.internalUsername, password: password, allowPlain: false, clientNonce: "cn")
        _ = client.start()
        guard case .auth(_, let first) = client.receive(.success(Array("SCRAM-SHA512 PLAIN".utf8))),
            let login = registry.scramLogin(username: NodeRegistry.internalUsername, hash: .sha512)
        else { return false }
        var server = ScramServer(hash: .sha512)
        guard
            case .challenge(let serverFirst) = server.receiveClientFirst(
                first, keys: login.keys, decoy: login.keys, serverNonce: "sn", alsoAccept: login.alsoAccept),
            case .step(_, let final) = client.receive(.authContinue(serverFirst)),
            case .success(_, let serverFinal) = server.receiveClientFinal(final)
        else { return false }
        return client.receive(.success(serverFinal)) == .succeeded(mechanism: "SCRAM-SHA512")
    }

    @Test func internalUserLogsInWithScramAndRotationHasAGracePeriod() throws {
        // Proves the internal user has SCRAM keys (it used to be PLAIN only); after a rotation the previous secret
        // logs in (SCRAM and Basic) and is the one sent until the grace period ends, then only the new one works.
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let clock = ManualWallClock()
        let r = try NodeRegistry(dataDirectory: dir.path, node: testNode, clock: clock, logger: testLogger)
        defer { r.shutdown() }
        let old = r.internalCredentials.password
        #expect(Self.login(r, password: old))
        #expect(!Self.login(r, password: old + "x"))
        #expect(r.internalSecretGraceEnd == nil)

        let before = r.clusterSnapshot.revision
        try r.rotateInternalSecret(graceSeconds: 30)
        #expect(r.clusterSnapshot.revision > before)
        #expect(r.internalCredentials.password == old)  // sent until every member has the new one
        let new = try #require(r.snapshots.read { $0.internalSecret })
        #expect(new != old)
        for secret in [old, new] {
            #expect(Self.login(r, password: secret))
            #expect(r.authenticate(username: NodeRegistry.internalUsername, password: secret) == .admin)
        }

        clock.advance(seconds: 31)
        #expect(r.internalSecretGraceEnd == nil)
        #expect(r.internalCredentials.password == new)
        #expect(!Self.login(r, password: old))
        #expect(r.authenticate(username: NodeRegistry.internalUsername, password: old) == nil)
        #expect(Self.login(r, password: new))
    }

    @Test func adminPasswordChangeRotatesTheSecret() throws {
        // Proves setting the first credentials does not rotate, and replacing them does, in a new revision.
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        defer { r.shutdown() }
        let first = try r.initialize(username: "admin", password: "password")
        #expect(!first)
        let secret = r.internalCredentials.password
        let before = r.clusterSnapshot.revision
        #expect(try r.initialize(username: "admin", password: "password-2"))
        #expect(r.clusterSnapshot.revision > before)
        #expect(r.snapshots.read { $0.internalSecret } != secret)
        #expect(r.internalSecretGraceEnd != nil)
    }

    @Test func failuresInTheInternalUsersNameDoNotLockItOut() throws {
        // Proves five bad logins as the internal user (from anywhere) do not throttle the nodes' own logins from
        // other addresses, which would cut replication, while the failing (user, source) pair is throttled; an
        // ordinary user name is throttled the same way, per pair (ADR 0144: nobody's failures refuse anyone else).
        let dir = TemporaryDirectory("admin")
        defer { dir.remove() }
        let r = try makeRegistry(dir)
        defer { r.shutdown() }
        let guardian = r.loginGuard
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            guardian.recordFailure(source: "10.0.0.66", user: NodeRegistry.internalUsername)
            guardian.recordFailure(source: "10.0.0.66", user: "admin")
        }
        #expect(guardian.decide(source: "10.0.0.2", user: NodeRegistry.internalUsername) == .allow)
        #expect(guardian.decide(source: "10.0.0.66", user: NodeRegistry.internalUsername) != .allow)
        #expect(guardian.decide(source: "10.0.0.66", user: "admin") != .allow)
        #expect(guardian.decide(source: "10.0.0.2", user: "admin") == .allow)
        guardian.reset()
        for _ in 0..<Limits.loginFailuresBeforeThrottle {
            guardian.recordFailure(source: "10.0.0.67", user: NodeRegistry.internalUsername)
        }
        #expect(guardian.decide(source: "10.0.0.3", user: NodeRegistry.internalUsername) == .allow)
    }

    @Test func serverAcceptsAnAlternativeKeyOnlyWithTheSameSalt() {
        // Proves `alsoAccept` lets a second password of the same user log in and signs with its ServerKey, and
        // that keys with another salt are ignored (the client's proof is derived from the challenge's salt).
        let salt: [UInt8] = Array(repeating: 3, count: 16)
        let current = ScramKeys.derive(password: "new-secret", salt: salt, iterations: 4096, hash: .sha256)
        let previous = ScramKeys.derive(password: "old-secret", salt: salt, iterations: 4096, hash: .sha256)
        let otherSalt = ScramKeys.derive(password: "other", salt: [9, 9], iterations: 4096, hash: .sha256)
        for (password, ok) in [("new-secret", true), ("old-secret", true), ("other", false), ("wrong", false)] {
            var client = ScramClient(hash: .sha256, username: "u", password: password, clientNonce: "cn")
            var server = ScramServer(hash: .sha256)
            guard
                case .challenge(let sf) = server.receiveClientFirst(
                    client.clientFirst, keys: current, decoy: current, serverNonce: "sn",
                    alsoAccept: [previous, otherSalt]),
                let final = client.receiveServerFirst(sf)
            else {
                Issue.record("no challenge")
                return
            }
            let reply = server.receiveClientFinal(final)
            if case .success(_, let v) = reply {
                #expect(ok && client.verifyServerFinal(v), "\(password)")
            } else {
                #expect(!ok, "\(password)")
            }
        }
    }
}
