import SetteeAuth
import SetteeCore
import Testing

/// The client login every first-party client runs (`SaslClientLogin`), driven against the real `ScramServer`
/// without sockets.
@Suite struct ScramClientLoginTests {
    static let allMechanisms = Array("SCRAM-SHA512 SCRAM-SHA256 SCRAM-SHA1 PLAIN".utf8)

    /// Runs `login` against a `ScramServer` holding `serverKeys`, letting `tamper` rewrite the server's final
    /// message; returns the last directive.
    static func run(
        _ login: inout SaslClientLogin, offered: [UInt8] = allMechanisms, serverKeys: (ScramHash) -> ScramKeys,
        tamper: ([UInt8]) -> [UInt8] = { $0 }
    ) -> SaslClientLogin.Directive {
        #expect(login.start() == .listMechanisms)
        var directive = login.receive(.success(offered))
        var server: ScramServer?
        for _ in 0..<4 {
            switch directive {
            case .auth(let mechanism, let payload):
                guard let hash = ScramHash(mechanism: mechanism) else { return directive }
                var s = ScramServer(hash: hash)
                let reply = s.receiveClientFirst(
                    payload, keys: serverKeys(hash), decoy: decoy, serverNonce: "srvnonce")
                server = s
                guard case .challenge(let first) = reply else { return login.receive(.refused(status: 0x20)) }
                directive = login.receive(.authContinue(first))
            case .step(_, let payload):
                guard var s = server else { return directive }
                let reply = s.receiveClientFinal(payload)
                guard case .success(_, let final) = reply else { return login.receive(.refused(status: 0x20)) }
                directive = login.receive(.success(tamper(final)))
            default:
                return directive
            }
        }
        return directive
    }

    @Test func picksTheStrongestScramAndVerifiesTheServer() {
        // Proves the login chooses SCRAM-SHA512 from Couchbase's list and succeeds against the server.
        var login = SaslClientLogin(username: "admin", password: "password", allowPlain: false, clientNonce: "cn")
        let end = Self.run(&login) { keys($0) }
        #expect(end == .succeeded(mechanism: "SCRAM-SHA512"))
    }

    @Test func mechanismChoice() {
        // Proves the preference order and that PLAIN is chosen only when nothing else is offered and allowed.
        #expect(SaslClientLogin.choose(offered: "PLAIN SCRAM-SHA1 SCRAM-SHA256", allowPlain: true) == "SCRAM-SHA256")
        #expect(SaslClientLogin.choose(offered: "SCRAM-SHA1 PLAIN", allowPlain: true) == "SCRAM-SHA1")
        #expect(SaslClientLogin.choose(offered: "PLAIN", allowPlain: false) == nil)
        #expect(SaslClientLogin.choose(offered: "PLAIN", allowPlain: true) == "PLAIN")
        #expect(SaslClientLogin.choose(offered: "CRAM-MD5", allowPlain: true) == nil)
        #expect(SaslClientLogin.choose(offered: "", allowPlain: true) == nil)
    }

    @Test func plainOnlyServerIsRefusedUnlessAllowed() {
        // Proves a server offering only PLAIN does not get the password unless the caller allowed it.
        var refused = SaslClientLogin(username: "u", password: "secret", allowPlain: false, clientNonce: "cn")
        _ = refused.start()
        #expect(refused.receive(.success(Array("PLAIN".utf8))) == .failed(.noAcceptableMechanism(offered: "PLAIN")))
        var allowed = SaslClientLogin(username: "u", password: "secret", allowPlain: true, clientNonce: "cn")
        _ = allowed.start()
        #expect(
            allowed.receive(.success(Array("PLAIN".utf8)))
                == .auth(mechanism: "PLAIN", payload: [0] + Array("u".utf8) + [0] + Array("secret".utf8)))
        #expect(allowed.receive(.success([])) == .succeeded(mechanism: "PLAIN"))
    }

    @Test(arguments: ScramHash.allCases)
    func wrongServerSignatureFailsTheLogin(_ hash: ScramHash) {
        // Proves a server that cannot prove it knows the keys (a flipped byte in v=, or no v= at all) fails.
        let offered = Array(hash.mechanism.utf8)
        var flipped = SaslClientLogin(username: "admin", password: "password", allowPlain: false, clientNonce: "cn")
        let end = Self.run(&flipped, offered: offered, serverKeys: { keys($0) }) { final in
            var f = final
            f[f.count - 3] ^= 1
            return f
        }
        #expect(end == .failed(.serverNotVerified))
        var empty = SaslClientLogin(username: "admin", password: "password", allowPlain: false, clientNonce: "cn")
        #expect(Self.run(&empty, offered: offered, serverKeys: { keys($0) }) { _ in [] } == .failed(.serverNotVerified))
    }

    @Test func serverThatSkipsTheChallengeFails() {
        // Proves "success" in answer to client-first (a server that never challenged) is not a login.
        var login = SaslClientLogin(username: "admin", password: "password", allowPlain: false, clientNonce: "cn")
        _ = login.start()
        guard case .auth = login.receive(.success(Self.allMechanisms)) else {
            Issue.record("no SASL_AUTH")
            return
        }
        #expect(login.receive(.success([])) == .failed(.unexpectedAnswer))
        #expect(login.receive(.success([])) == .failed(.unexpectedAnswer))
    }

    @Test func wrongPasswordIsRefused() {
        // Proves a refused proof ends the login with the server's status.
        var login = SaslClientLogin(username: "admin", password: "wrong", allowPlain: false, clientNonce: "cn")
        #expect(Self.run(&login) { keys($0) } == .failed(.refused(status: 0x20)))
    }

    @Test func challengeBounds() {
        // Proves the client refuses a challenge with too many or zero iterations, an empty salt, or a nonce that
        // only echoes its own (no server part), before any PBKDF2 work.
        for serverFirst in [
            "r=cnS,s=AAECAw==,i=\(Limits.scramClientMaxIterations + 1)", "r=cnS,s=AAECAw==,i=0",
            "r=cnS,s=AAECAw==,i=-4", "r=cnS,s=,i=4096", "r=cn,s=AAECAw==,i=4096", "r=xxS,s=AAECAw==,i=4096",
            "r=cnS,s=AAECAw==", "garbage",
        ] {
            var login = SaslClientLogin(username: "admin", password: "password", allowPlain: false, clientNonce: "cn")
            _ = login.start()
            _ = login.receive(.success(Self.allMechanisms))
            #expect(login.receive(.authContinue(Array(serverFirst.utf8))) == .failed(.badChallenge), "\(serverFirst)")
        }
    }

    @Test func randomNoncesArePrintableAndDistinct() {
        // Proves nonces carry no comma (SCRAM's separator) and do not repeat.
        let a = SaslClientLogin.randomNonce()
        let b = SaslClientLogin.randomNonce()
        #expect(a.count == 24 && !a.contains(",") && a != b)
    }
}
