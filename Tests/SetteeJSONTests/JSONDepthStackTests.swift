import Foundation
import SetteeCore
import SetteeJSON
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The stack a document nested `Limits.maxDocumentDepth` deep costs the recursive walks over `JSON` (parse, serialize,
/// compare, measure, free), measured by painting a thread's stack and finding the deepest byte touched: the figures
/// behind the bound (ADR 0121), and a guard that the bound stays within the smallest stack such work runs on.
@Suite struct JSONDepthStackTests {
    /// A text of `depth` nested arrays around `1` (`[[…[1]…]]`): depth 1 is `[1]`.
    static func nested(_ depth: Int) -> [UInt8] {
        Array(repeating: UInt8(ascii: "["), count: depth) + [UInt8(ascii: "1")]
            + Array(repeating: UInt8(ascii: "]"), count: depth)
    }

    /// Bytes of stack `body` used below the point it was called from, run on a thread of its own with a `stack`-byte
    /// stack: the thread's stack is painted with a pattern first and the lowest byte no longer holding it is the
    /// deepest one reached.
    static func stackUse(stack: Int = 64 << 20, _ body: @escaping @Sendable () -> Void) -> Int {
        let result = StackUseBox()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            result.value = paintedRun(body)
            done.signal()
        }
        thread.stackSize = stack
        thread.start()
        done.wait()
        return result.value
    }

    final class StackUseBox: @unchecked Sendable { var value = 0 }

    /// A tree for another thread to free.
    final class Holder: @unchecked Sendable {
        var value: JSON?
        init(_ value: JSON) { self.value = value }
    }

    private static let pattern: UInt8 = 0xA5

    @inline(never)
    private static func paintedRun(_ body: () -> Void) -> Int {
        #if canImport(Glibc)
            // `pthread_getattr_np` is a GNU extension Glibc's module does not import.
            typealias GetAttr = @convention(c) (pthread_t, UnsafeMutablePointer<pthread_attr_t>) -> Int32
            guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "pthread_getattr_np") else { return -1 }
            let getattr = unsafeBitCast(symbol, to: GetAttr.self)
            let attr = UnsafeMutablePointer<pthread_attr_t>.allocate(capacity: 1)
            defer { attr.deallocate() }
            guard getattr(pthread_self(), attr) == 0 else { return -1 }
            defer { pthread_attr_destroy(attr) }
            var low: UnsafeMutableRawPointer?
            var size = 0
            guard pthread_attr_getstack(attr, &low, &size) == 0, let low else { return -1 }
            var marker: UInt8 = 0
            let here = withUnsafeMutablePointer(to: &marker) { UnsafeMutableRawPointer($0) }
            // Leave the guard area and this frame's red zone alone.
            let start = low + 64 * 1024
            let count = here - start - 16 * 1024
            guard count > 0 else { return -1 }
            memset(start, Int32(pattern), count)
            body()
            var i = 0
            while i < count, start.load(fromByteOffset: i, as: UInt8.self) == pattern { i += 1 }
            return count - i
        #else
            return -1
        #endif
    }

    // Proves (and prints) what each recursive walk costs per level: the measurement ADR 0121 records. The deepest walk of
    // a document at the bound in its envelope must take at most half the smallest stack JSON work runs on
    // (`Limits.minimumThreadStack`), in the build the tests run (debug, the costliest).
    @Test func stackPerLevel() throws {
        let depth = 2_000
        let text = Self.nested(depth)
        let parsed = try JSON.parse(text, maxDepth: depth)
        let parse = Self.stackUse { _ = try? JSON.parse(text, maxDepth: depth) }
        let serialize = Self.stackUse { _ = parsed.serialized() }
        let copy = try JSON.parse(text, maxDepth: depth)
        let compare = Self.stackUse { _ = copy == parsed }
        let measure = Self.stackUse { _ = parsed.nestingDepth }
        let holder = Holder(try JSON.parse(text, maxDepth: depth))
        let free = Self.stackUse { holder.value = nil }
        let size = Self.stackUse { _ = parsed.approximateSerializedSize }
        let figures = [
            ("parse", parse), ("serialize", serialize), ("compare", compare), ("nestingDepth", measure),
            ("free", free), ("approximateSize", size),
        ]
        for (name, bytes) in figures {
            print("JSON stack per level (\(depth) deep): \(name) \(bytes / depth) B (\(bytes) B total)")
        }
        let worst = figures.map(\.1).max() ?? 0
        #expect(worst > 0)
        let atBound = worst / depth * (Limits.maxDocumentDepth + Limits.documentEnvelopeDepth)
        #expect(atBound * 2 <= Limits.minimumThreadStack, "a walk at the bound takes \(atBound) B")
    }
}
