import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// `settee-server` raises glibc's arena limit before it starts its threads (ADR 0108).
@Suite(.onTestThreads) struct MallocArenasTests {
    @Test func glibcTakesTheArenaLimit() {
        #if os(Linux)
            #expect(MallocArenas.limit >= 64)
            // mallopt answers 1 when it took the setting; raising the limit in the test process is harmless.
            #expect(MallocArenas.giveEachThreadItsOwn())
        #endif
    }
}
