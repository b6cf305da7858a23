import Foundation
import HTTPTypes
import Hummingbird
import SetteeCore
import SetteeRegistry
import SetteeStorage
import Testing

@Suite struct HostileNumberTests {
    @Test func hugeRAMQuotasAreRefused() async throws {
        // Proves a bucket `ramQuota` or node `memoryQuota` that overflowed when turned into bytes
        // (`Int.max` MiB × 2^20 trapped) is a 400 field error, and the largest accepted one creates a bucket.
        try await withAdmin { client, registry in
            for form in ["name=b&ramQuotaMB=\(Int.max)", "name=b&ramQuotaMB=\(Limits.maxBucketRamQuotaMB + 1)"] {
                let r = try await call(client, .post, "/pools/default/buckets", form: form)
                #expect(r.status == .badRequest)
                #expect(r.errors?["ramQuota"] == "RAM quota cannot be more than \(Limits.maxBucketRamQuotaMB) MiB")
            }
            #expect(registry.bucketNames.isEmpty)
            let pool = try await call(client, .post, "/pools/default", form: "memoryQuota=\(Int.max)")
            #expect(pool.status == .badRequest)
            #expect(try await call(client, .get, "/pools/default").status == .ok)
        }
    }

    @Test func documentsListingRefusesAHugeSkip() async throws {
        // Proves the console's documents listing answers 400 to a `skip` whose `skip + limit` overflowed
        // (it trapped before) and still pages with an ordinary one.
        try await withAdmin { client, _ in
            let created = try await call(
                client, .post, "/pools/default/buckets", form: "name=docs&ramQuotaMB=100&replicaNumber=0")
            #expect(created.status == .accepted)
            let huge = try await call(client, .get, "/pools/default/buckets/docs/docs?skip=\(Int.max)&limit=10")
            #expect(huge.status == .badRequest, "\(huge.body)")
            let over = try await call(
                client, .get, "/pools/default/buckets/docs/docs?skip=\(Limits.consoleMaxSkip + 1)&limit=10")
            #expect(over.status == .badRequest)
            let page = try await call(client, .get, "/pools/default/buckets/docs/docs?skip=5&limit=10")
            #expect(page.status == .ok, "\(page.body)")
        }
    }
}
