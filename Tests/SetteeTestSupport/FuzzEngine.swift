import Foundation
import SetteeCore

#if canImport(Glibc)
    import Glibc
#endif

/// A seeded, mutation-based fuzz loop run inside the test process (see `docs/internals/fuzzing.md` for
/// why not libFuzzer). Each target starts from its checked-in corpus `Tests/FuzzCorpus/<target>/`,
/// replays every file as is (crashes found earlier stay fixed), then runs mutated inputs: bit flips,
/// interesting numbers, splices with other corpus files, truncation, duplication, random bytes and the
/// target's dictionary tokens.
///
/// A Swift trap kills the process, so nothing after a crash can run. To keep a crash reproducible the
/// loop prints the target, seed and iteration count on stderr before it starts, and a signal handler
/// writes the input being run to `Tests/FuzzCorpus/<target>/crash-<seed>` before the process dies;
/// that file is then a regression case the next run replays first.
///
/// Environment: `SETTEE_FUZZ_ITERATIONS` (mutations per target, default `FuzzTarget.defaultIterations`), `SETTEE_FUZZ_SECONDS`
/// (run each target for this long instead; `make fuzz`), `SETTEE_FUZZ_SEED` (default: a fixed seed per
/// target, so `make test` is deterministic), `SETTEE_FUZZ_TARGET` (run only this target).
package struct FuzzTarget: Sendable {
    package var name: String
    /// Mutations in the short pass of `make test` when `SETTEE_FUZZ_ITERATIONS` is not set: pure parsers
    /// run ~20,000 inputs a second on one core, the HTTP pipelines ~1,000.
    package var defaultIterations = 20_000
    /// Byte strings the mutator inserts or overwrites with (keywords, separators of the format).
    package var dictionary: [[UInt8]] = []
    package var maxInputLength = 4096
    package var body: @Sendable (_ input: [UInt8]) async throws -> Void

    package init(
        name: String, defaultIterations: Int = 20_000, dictionary: [[UInt8]] = [], maxInputLength: Int = 4096,
        body: @escaping @Sendable (_ input: [UInt8]) async throws -> Void
    ) {
        self.name = name
        self.defaultIterations = defaultIterations
        self.dictionary = dictionary
        self.maxInputLength = maxInputLength
        self.body = body
    }
}

extension SplitMix64 {
    /// A number in 0..<n (0 when n ≤ 1): the mutator's choices, the same for a seed on every platform.
    package mutating func below(_ n: Int) -> Int { n <= 1 ? 0 : Int(next() % UInt64(n)) }
}

package struct FuzzReport {
    package var target: String
    package var seed: UInt64
    package var corpusFiles: Int
    package var executions: Int
    package var seconds: Double
    /// Inputs a target flagged as wrong without crashing (a property check failed), with why.
    package var findings: [(input: [UInt8], reason: String)] = []
}

package enum Fuzz {
    package static var corpusRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("FuzzCorpus")
    }

    package static func environment(_ name: String) -> String? { ProcessInfo.processInfo.environment[name] }

    /// Whether `target` runs in this process (`SETTEE_FUZZ_TARGET` unset, or naming it).
    package static func selected(_ target: String) -> Bool {
        guard let only = environment("SETTEE_FUZZ_TARGET"), !only.isEmpty else { return true }
        return only.split(separator: ",").contains { $0 == target }
    }

    package static func corpus(_ target: String) -> [[UInt8]] {
        let dir = corpusRoot.appendingPathComponent(target)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.sorted().compactMap { name in
            (try? Data(contentsOf: dir.appendingPathComponent(name))).map { Array($0) }
        }
    }

    /// Replays the corpus, then mutates it until the iteration count or time budget is spent.
    package static func run(_ target: FuzzTarget) async -> FuzzReport {
        let seed = environment("SETTEE_FUZZ_SEED").flatMap { UInt64($0) } ?? stableSeed(target.name)
        let seconds = environment("SETTEE_FUZZ_SECONDS").flatMap { Double($0) }
        let iterations = environment("SETTEE_FUZZ_ITERATIONS").flatMap { Int($0) } ?? target.defaultIterations
        var corpus = corpus(target.name)
        if corpus.isEmpty { corpus = [[]] }
        let budget = seconds.map { "\($0) s" } ?? "\(iterations) iterations"
        FileHandle.standardError.write(
            Data(
                ("fuzz \(target.name): seed \(seed), \(budget), \(corpus.count) corpus files; reproduce with "
                    + "SETTEE_FUZZ_TARGET=\(target.name) SETTEE_FUZZ_SEED=\(seed)\n").utf8))
        CrashCapture.arm(
            path: corpusRoot.appendingPathComponent(target.name).appendingPathComponent("crash-\(seed)").path)
        defer { CrashCapture.disarm() }
        let start = ContinuousClock.now
        var executions = 0
        var findings: [(input: [UInt8], reason: String)] = []
        for input in corpus {
            if let f = await execute(target, input) { findings.append((input, f)) }
            executions += 1
        }
        var rng = SplitMix64(seed: seed)
        let deadline = seconds.map { start + .milliseconds(Int64($0 * 1000)) }
        var n = 0
        while deadline.map({ ContinuousClock.now < $0 }) ?? (n < iterations) {
            let base = corpus[rng.below(corpus.count)]
            let input = Mutator.mutate(
                base, corpus: corpus, dictionary: target.dictionary, max: target.maxInputLength, &rng)
            if let f = await execute(target, input) { findings.append((input, f)) }
            executions += 1
            n += 1
        }
        let elapsed = ContinuousClock.now - start
        let secs = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        FileHandle.standardError.write(
            Data(
                "fuzz \(target.name): \(executions) executions, 0 crashes, \(findings.count) findings, \(String(format: "%.1f", secs)) s\n"
                    .utf8))
        return FuzzReport(
            target: target.name, seed: seed, corpusFiles: corpus.count, executions: executions, seconds: secs,
            findings: findings)
    }

    /// Runs one input; a `FuzzFinding` thrown by the target's own checks is returned, any other error is
    /// the expected answer to bad input (only traps and findings are bugs).
    private static func execute(_ target: FuzzTarget, _ input: [UInt8]) async -> String? {
        CrashCapture.record(input)
        do { try await target.body(input) } catch let f as FuzzFinding { return f.description } catch {}
        return nil
    }

    /// FNV-1a of the name: a fixed default seed per target, so `make test` runs the same inputs each time.
    package static func stableSeed(_ name: String) -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in name.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        return h
    }
}

package enum Mutator {
    static let interesting: [[UInt8]] = [
        Array("0".utf8), Array("-1".utf8), Array("1e20".utf8), Array("-0".utf8), Array("NaN".utf8),
        Array("9223372036854775807".utf8), Array("9223372036854775808".utf8), Array("18446744073709551615".utf8),
        Array("4294967295".utf8), Array("65535".utf8), Array("1.5".utf8), Array("%00".utf8), Array("%".utf8),
        Array("//".utf8), [0], [0xFF], [0x7F], [0x80], [0xFF, 0xFF, 0xFF, 0xFF], [0x7F, 0xFF, 0xFF, 0xFF],
        [0, 0, 0, 0], [0xC0, 0x80], [0xED, 0xA0, 0x80], Array("\\u0000".utf8), Array("\\ud800".utf8),
    ]

    package static func mutate(
        _ base: [UInt8], corpus: [[UInt8]], dictionary: [[UInt8]], max: Int, _ rng: inout SplitMix64
    ) -> [UInt8] {
        var out = base
        let rounds = 1 + rng.below(4)
        for _ in 0..<rounds { step(&out, corpus: corpus, dictionary: dictionary, &rng) }
        if out.count > max { out.removeLast(out.count - max) }
        return out
    }

    static func step(_ b: inout [UInt8], corpus: [[UInt8]], dictionary: [[UInt8]], _ rng: inout SplitMix64) {
        let at = rng.below(b.count + 1)
        switch rng.below(10) {
        case 0 where !b.isEmpty:  // flip a bit
            let i = rng.below(b.count)
            b[i] ^= UInt8(1) << UInt8(rng.below(8))
        case 1 where !b.isEmpty:  // set a random byte
            b[rng.below(b.count)] = UInt8(truncatingIfNeeded: rng.next())
        case 2:  // insert an interesting value
            b.insert(contentsOf: interesting[rng.below(interesting.count)], at: at)
        case 3 where !dictionary.isEmpty:  // insert a dictionary token
            b.insert(contentsOf: dictionary[rng.below(dictionary.count)], at: at)
        case 4 where !b.isEmpty:  // truncate
            b.removeLast(rng.below(b.count) + 1)
        case 5 where !b.isEmpty:  // delete a range
            let len = 1 + rng.below(min(16, b.count - at + 1))
            b.removeSubrange(at..<min(b.count, at + len))
        case 6 where !b.isEmpty:  // duplicate a range
            let from = rng.below(b.count)
            let len = 1 + rng.below(min(64, b.count - from))
            b.insert(contentsOf: b[from..<(from + len)], at: at)
        case 7:  // splice with another corpus input
            let other = corpus[rng.below(corpus.count)]
            let cut = rng.below(other.count + 1)
            b = Array(b.prefix(at)) + other.suffix(from: cut)
        case 8:  // insert random bytes
            for _ in 0..<(1 + rng.below(8)) { b.insert(UInt8(truncatingIfNeeded: rng.next()), at: min(at, b.count)) }
        default:  // overwrite with a dictionary token or interesting value
            let token =
                dictionary.isEmpty || rng.below(2) == 0
                ? interesting[rng.below(interesting.count)] : dictionary[rng.below(dictionary.count)]
            let end = min(b.count, at + token.count)
            b.replaceSubrange(at..<end, with: token)
        }
    }
}

/// A finding of a target's own checks (a property that does not hold, a server that died): reported
/// with its input, not a crash.
package struct FuzzFinding: Error, CustomStringConvertible {
    package var description: String
    package init(_ d: String) { description = d }
}

/// Saves the input being run when the process dies of a signal (a Swift trap is SIGILL or SIGTRAP),
/// with async-signal-safe calls only: open, write, close, then the default action.
package enum CrashCapture {
    nonisolated(unsafe) static var buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: 1 << 20)
    nonisolated(unsafe) static var length = 0
    nonisolated(unsafe) static var path = UnsafeMutablePointer<CChar>.allocate(capacity: 4096)
    nonisolated(unsafe) static var armed = false
    /// The handlers in place before `arm` (the Swift runtime's backtracer), put back by `disarm`.
    nonisolated(unsafe) static var previous: [Int32: sigaction] = [:]
    static let signals: [Int32] = [SIGILL, SIGTRAP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE]

    static func arm(path p: String) {
        let bytes = Array(p.utf8CString.prefix(4095))
        for (i, c) in bytes.enumerated() { path[i] = c }
        path[bytes.count] = 0
        length = 0
        armed = true
        for s in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { sig in
                if CrashCapture.armed {
                    let fd = open(CrashCapture.path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
                    if fd >= 0 {
                        _ = write(fd, CrashCapture.buffer, CrashCapture.length)
                        close(fd)
                    }
                }
                signal(sig, SIG_DFL)
                raise(sig)
            }
            var old = sigaction()
            sigaction(s, &action, &old)
            previous[s] = old
        }
    }

    static func record(_ input: [UInt8]) {
        let n = min(input.count, 1 << 20)
        input.withUnsafeBufferPointer { src in
            if let base = src.baseAddress { buffer.update(from: base, count: n) }
        }
        length = n
    }

    static func disarm() {
        armed = false
        for (s, old) in previous {
            var action = old
            sigaction(s, &action, nil)
        }
        previous = [:]
    }
}
