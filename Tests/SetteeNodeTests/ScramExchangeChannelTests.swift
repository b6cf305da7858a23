import Foundation
import NIOCore
import NIOEmbedded
import SetteeAuth
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import Testing

@testable import SetteeNode

/// A KV connection's SCRAM exchange and its place in the login throttle, on the connection handler driven through
/// NIO's testing channel (time moves only when a test advances it).
@Suite(.serialized) struct ScramExchangeChannelTests {
    typealias Fixture = KVHandlerChannelTests.Fixture

    /// The source the fixture's connection logs in from: its remote address 127.0.0.1:40000 (made without a host
    /// name, so described `[IPv4]127.0.0.1:40000`) as `LoginGuard.sourceHost` reduces it, the address alone. The
    /// exchange's check is held under (admin, this source) from SASL_AUTH to its end, and freed under the same pair.
    static let source = "127.0.0.1"

    /// Failures and running checks the throttle counts for the (admin, `source`) pair: how much of the allowance a
    /// login as the admin from `source` finds taken (the checks it takes to find out are abandoned again). Another
    /// source's pair shares none of it (ADR 0144).
    static func held(_ f: Fixture, source: String = source) -> Int {
        let loginGuard = f.registry.loginGuard
        var allowed = 0
        while allowed < Limits.loginFailuresBeforeThrottle,
            loginGuard.beginCheck(source: source, user: adminUser) == .allow
        {
            allowed += 1
        }
        for _ in 0..<allowed { loginGuard.abandonCheck(source: source, user: adminUser) }
        return Limits.loginFailuresBeforeThrottle - allowed
    }

    /// Sends SASL_AUTH (SCRAM-SHA512, the admin) and returns the client and the answer.
    static func start(_ f: Fixture, password: String = adminPassword) async throws -> (ScramClient, Frame) {
        let client = ScramClient(hash: .sha512, username: adminUser, password: password, clientNonce: "test nonce")
        try await f.channel.writeInbound(f.request(.saslAuth, key: "SCRAM-SHA512", value: client.clientFirst))
        let answer = try #require(try await f.responses().first)
        #expect(answer.status == .authContinue)
        return (client, answer)
    }

    /// Finishes an exchange `start` began: SASL_STEP with the client's proof; returns its status.
    static func finish(_ f: Fixture, _ client: inout ScramClient, _ challenge: Frame) async throws -> Status {
        let answer = client.receiveServerFirst(Array(challenge.value.readableBytesView))
        let proof = try #require(answer)
        try await f.channel.writeInbound(f.request(.saslStep, key: "SCRAM-SHA512", value: proof))
        return try #require(try await f.responses().first).status
    }

    enum Ending: CaseIterable {
        case newSaslAuth, plainSaslAuth, hello, stepForAnotherMechanism, timeout, close
    }

    /// Proves a SCRAM exchange holds one of the throttle's running checks from SASL_AUTH to its proof, and that
    /// every way it can end without a proof frees it (none recorded as a failure), so the count never leaks: a new
    /// SASL_AUTH (SCRAM: it then holds its own one; PLAIN), HELLO, a SASL_STEP of another mechanism,
    /// `Limits.scramStepTimeoutMs` without a proof (a late proof is refused), and the connection closing.
    @Test(arguments: Ending.allCases)
    func anExchangeEndedWithoutAProofFreesItsCheck(_ ending: Ending) async throws {
        let f = try await Fixture(open: false, handshakeDeadline: .zero)
        var (client, challenge) = try await Self.start(f)
        #expect(Self.held(f) == 1)
        #expect(Self.held(f, source: "10.9.9.9") == 0, "another source's pair holds nothing")
        switch ending {
        case .newSaslAuth:
            _ = try await Self.start(f)
            #expect(Self.held(f) == 1)
        case .plainSaslAuth:
            // PLAIN is checked on the blocking pool; its answer is not awaited here.
            try await f.channel.writeInbound(
                f.request(.saslAuth, key: "PLAIN", value: [0] + Array("nobody".utf8) + [0] + Array("x".utf8)))
            #expect(Self.held(f) == 0)
        case .hello:
            try await f.channel.writeInbound(f.request(.hello, key: "test", value: [0, 0x0b]))
            #expect(try await f.responses().first?.status == .success)
            #expect(Self.held(f) == 0)
        case .stepForAnotherMechanism:
            try await f.channel.writeInbound(f.request(.saslStep, key: "SCRAM-SHA256", value: Array("c=biws".utf8)))
            #expect(try await f.responses().first?.status == .authError)
            #expect(Self.held(f) == 0)
        case .timeout:
            await f.channel.testingEventLoop.advanceTime(by: .milliseconds(Int64(Limits.scramStepTimeoutMs - 100)))
            #expect(Self.held(f) == 1)
            await f.channel.testingEventLoop.advanceTime(by: .milliseconds(200))
            #expect(Self.held(f) == 0)
            #expect(try await Self.finish(f, &client, challenge) == .authError)
        case .close:
            try await f.channel.close()
            #expect(Self.held(f) == 0)
        }
        #expect(f.registry.loginGuard.decide(source: Self.source, user: adminUser) == .allow)
        await f.finish()
    }

    /// Proves SASL_STEP ends the exchange's check with the proof's outcome: a wrong proof frees it and counts as a
    /// failure; a right one frees it and logs the connection in.
    @Test func theProofEndsTheCheck() async throws {
        let f = try await Fixture(open: false, handshakeDeadline: .zero)
        var (wrong, wrongChallenge) = try await Self.start(f, password: "wrong")
        #expect(try await Self.finish(f, &wrong, wrongChallenge) == .authError)
        #expect(Self.held(f) == 1, "one failure recorded, no check running")
        var (right, rightChallenge) = try await Self.start(f)
        #expect(try await Self.finish(f, &right, rightChallenge) == .success)
        #expect(Self.held(f) == 0, "the success cleared the user's failure and nothing is running")
        #expect(f.registry.loginGuard.passwordChecks == 2)
        await f.finish()
    }

    /// Proves a SASL_AUTH whose client-first is over `Limits.scramMaxClientMessageBytes` is answered AUTH_ERROR, as
    /// a malformed one is, and leaves nothing behind: no exchange kept, no check held.
    @Test func anOversizedClientFirstIsRefused() async throws {
        let f = try await Fixture(open: false, handshakeDeadline: .zero)
        let long = "n,,n=\(adminUser),r=" + String(repeating: "x", count: Limits.scramMaxClientMessageBytes)
        try await f.channel.writeInbound(f.request(.saslAuth, key: "SCRAM-SHA512", value: Array(long.utf8)))
        #expect(try await f.responses().map(\.status) == [.authError])
        #expect(Self.held(f) == 0)
        try await f.channel.writeInbound(f.request(.saslStep, key: "SCRAM-SHA512", value: Array("c=biws".utf8)))
        #expect(try await f.responses().map(\.status) == [.authError])
        await f.finish()
    }
}
