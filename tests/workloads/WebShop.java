// A Spring-style web service in one file, for tests/java_agent.rs: an
// HTTP server (the JDK's com.sun.net.httpserver, on a loopback port, its
// handlers run by a pool of threads named "shop-http-N") whose requests
// go through layers as a Spring application's do:
//
//   OrderController.handle -> OrderService.placeOrder
//       -> PricingService.price   (arithmetic: a loop of multiplications
//                                  and remainders)
//       -> OrderRepository.save   (strings: builds the order's record and
//                                  hashes its characters)
//
// and, in the same JVM, load-generator threads ("shop-client-N") that
// request orders over HTTP in a loop (HttpURLConnection, kept alive).
// Each request does a few milliseconds of work, its size drawn from a
// fixed sequence (so the run repeats, and the request period does not
// alias with a sampling period), the two leaves about even in CPU.
//
// Usage: java WebShop SECONDS. Prints "port N" and "ready" once serving
// and loaded, runs SECONDS, then prints "orders N" and exits. Needs
// nothing beyond the JDK: javac WebShop.java.
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

public class WebShop {
    static final int SERVER_THREADS = 2;
    static final int CLIENTS = 2;

    public static void main(String[] args) throws Exception {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 10.0;
        // Headers and body go out as two writes: without TCP_NODELAY the
        // body waits for the client's delayed ACK, 40 ms a request.
        System.setProperty("sun.net.httpserver.nodelay", "true");
        OrderRepository repository = new OrderRepository();
        OrderService service = new OrderService(new PricingService(), repository);
        HttpServer server =
                HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 64);
        server.createContext("/orders", new OrderController(service));
        AtomicInteger named = new AtomicInteger();
        ExecutorService pool = Executors.newFixedThreadPool(SERVER_THREADS,
                r -> new Thread(r, "shop-http-" + named.getAndIncrement()));
        server.setExecutor(pool);
        server.start();
        int port = server.getAddress().getPort();

        long end = System.nanoTime() + (long) (seconds * 1e9);
        AtomicLong orders = new AtomicLong();
        Thread[] clients = new Thread[CLIENTS];
        for (int i = 0; i < CLIENTS; i++) {
            LoadGenerator g = new LoadGenerator(port, i, end, orders);
            clients[i] = new Thread(g::run, "shop-client-" + i);
            clients[i].setDaemon(true);
            clients[i].start();
        }
        // Serving, and answered once: the pool and the clients are up.
        LoadGenerator.order(port, 0, 0);
        System.out.println("port " + port);
        System.out.println("ready");
        System.out.flush();
        for (Thread c : clients) c.join();
        server.stop(0);
        pool.shutdownNow();
        System.out.println("orders " + orders.get() + " stored " + repository.count());
        System.out.flush();
        System.exit(0);
    }
}

/// The web layer: parses the request, calls the service, writes the answer.
class OrderController implements HttpHandler {
    private final OrderService service;

    OrderController(OrderService service) {
        this.service = service;
    }

    @Override
    public void handle(HttpExchange exchange) throws java.io.IOException {
        String query = exchange.getRequestURI().getQuery();
        int item = 0, quantity = 1;
        if (query != null) {
            for (String kv : query.split("&")) {
                String[] p = kv.split("=", 2);
                if (p.length < 2) continue;
                if (p[0].equals("item")) item = Integer.parseInt(p[1]);
                if (p[0].equals("qty")) quantity = Integer.parseInt(p[1]);
            }
        }
        String receipt = service.placeOrder(item, quantity);
        byte[] body = receipt.getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().set("Content-Type", "text/plain");
        exchange.sendResponseHeaders(200, body.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(body);
        }
    }
}

/// The business layer: prices the order, then stores it.
class OrderService {
    private final PricingService pricing;
    private final OrderRepository repository;

    OrderService(PricingService pricing, OrderRepository repository) {
        this.pricing = pricing;
        this.repository = repository;
    }

    String placeOrder(int item, int quantity) {
        long cents = pricing.price(item, quantity);
        long id = repository.save(item, quantity, cents);
        return "order " + id + " " + cents + "\n";
    }
}

/// Prices an order: a loop of integer arithmetic whose length is the
/// order's size.
class PricingService {
    long price(int item, int quantity) {
        long rounds = 20_000L + 10_000L * quantity;
        long p = 1_000 + item;
        long total = 0;
        for (long i = 0; i < rounds; i++) {
            p = (p * 48_271 + i) % 2_147_483_647L;
            total += p % 1_000;
        }
        return total / rounds + item;
    }
}

/// Stores an order: builds its record as text and hashes its characters
/// (FNV-1a), the "row" kept being the hash.
class OrderRepository {
    private final AtomicLong stored = new AtomicLong();
    private volatile long last;

    long save(int item, int quantity, long cents) {
        int lines = 1_200 + 600 * quantity;
        StringBuilder row = new StringBuilder();
        for (int i = 0; i < lines; i++) {
            row.append("item=").append(item).append(";line=").append(i)
                    .append(";cents=").append(cents + i).append('\n');
        }
        long h = 0xcbf29ce484222325L;
        for (int i = 0; i < row.length(); i++) {
            h ^= row.charAt(i);
            h *= 0x100000001b3L;
        }
        last = h;
        return stored.incrementAndGet();
    }

    long count() {
        return stored.get();
    }
}

/// A client requesting orders in a loop until the end, each of a size
/// drawn from a fixed sequence.
class LoadGenerator {
    private final int port;
    private final long end;
    private final AtomicLong orders;
    private long seed;

    LoadGenerator(int port, int index, long end, AtomicLong orders) {
        this.port = port;
        this.end = end;
        this.orders = orders;
        this.seed = 1 + index;
    }

    private int next(int lo, int hi) {
        seed = seed * 6364136223846793005L + 1442695040888963407L;
        return lo + (int) ((seed >>> 33) % (hi - lo));
    }

    void run() {
        try {
            while (System.nanoTime() < end) {
                order(port, next(0, 100), next(1, 4));
                orders.incrementAndGet();
            }
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    /// One GET /orders?item=I&qty=Q, its answer read to the end (so the
    /// connection is kept alive for the next).
    static void order(int port, int item, int quantity) throws java.io.IOException {
        URL url = new URL("http://127.0.0.1:" + port + "/orders?item=" + item + "&qty=" + quantity);
        HttpURLConnection c = (HttpURLConnection) url.openConnection();
        if (c.getResponseCode() != 200) throw new java.io.IOException("HTTP " + c.getResponseCode());
        try (InputStream in = c.getInputStream()) {
            in.readAllBytes();
        }
    }
}
