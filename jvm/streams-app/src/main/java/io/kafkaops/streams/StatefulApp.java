package io.kafkaops.streams;

import java.io.IOException;
import java.io.PrintStream;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * A small stateful Kafka Streams application for kafkaops' tests and benchmarks (kafkaops.testing.streams),
 * never shipped with the product. Three stateful operations over one keyed input stream, each with a state
 * store of its own and so a changelog topic named after it ({@code <application.id>-<store>-changelog}):
 *
 * <ul>
 *   <li>a count per key (store {@code counts}) to {@code app.output.counts}: the key, the count as decimal text;</li>
 *   <li>a count per key and tumbling window of {@code app.window.ms} without grace (store {@code windowed-counts})
 *       to {@code app.output.windowed}: key {@code <key>@<window start ms>}, the count as decimal text;</li>
 *   <li>a join of the stream with the table topic {@code app.table} (store {@code table-store}; topology
 *       optimisation stays off, so the table has a changelog of its own rather than reusing its source topic)
 *       to {@code app.output.joined}: the key, {@code <stream value>|<table value>}.</li>
 * </ul>
 *
 * <p>It reads one argument, the path of a properties file: every key but those starting {@code app.} is a Kafka
 * Streams (or client) setting passed through as is, security settings included; nothing else comes from the
 * command line. Defaults: {@code processing.guarantee=exactly_once_v2}, {@code commit.interval.ms=200},
 * {@code num.stream.threads=1}. The app's own keys: {@code app.input}, {@code app.table},
 * {@code app.output.counts}, {@code app.output.windowed}, {@code app.output.joined} (required),
 * {@code app.window.ms} (default 60000) and {@code app.close.leave.group} (default true: a closed instance
 * leaves its group at once, so the others take its tasks without waiting for its session to time out).
 *
 * <p>Standard output carries one line per event, flushed: {@code STATE <new state>} on each state change,
 * {@code FATAL <class>: <message>} when a stream thread dies (the client then shuts down and the process exits
 * 1), {@code STOPPED} once closed. SIGTERM closes the client (at most 30 s) and exits 0 (3 when the close timed
 * out). A settings file that cannot be read, lacks a required key (an app key, {@code application.id},
 * {@code bootstrap.servers}) or holds a setting Kafka Streams refuses exits 2 with the reason on stderr. Kafka's
 * own logging (slf4j-simple): WARN and above, on stderr.
 */
public final class StatefulApp {

    public static final String INPUT = "app.input";
    public static final String TABLE = "app.table";
    public static final String OUTPUT_COUNTS = "app.output.counts";
    public static final String OUTPUT_WINDOWED = "app.output.windowed";
    public static final String OUTPUT_JOINED = "app.output.joined";
    public static final String WINDOW_MS = "app.window.ms";
    public static final String CLOSE_LEAVE_GROUP = "app.close.leave.group";
    public static final List<String> REQUIRED = List.of(INPUT, TABLE, OUTPUT_COUNTS, OUTPUT_WINDOWED, OUTPUT_JOINED);
    public static final long DEFAULT_WINDOW_MS = 60_000L;
    /** The stores, hence the changelogs {@code <application.id>-<store>-changelog}. */
    public static final String COUNTS_STORE = "counts";
    public static final String WINDOWED_STORE = "windowed-counts";
    public static final String TABLE_STORE = "table-store";
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(30);
    static final int EXIT_FAILED = 1;
    static final int EXIT_USAGE = 2;
    static final int EXIT_CLOSE_TIMED_OUT = 3;

    private static final PrintStream OUT = System.out;

    private StatefulApp() {
    }

    /** The app's own settings ({@code app.} keys), checked. */
    public record Settings(String input, String table, String counts, String windowed, String joined, Duration window,
                           boolean leaveGroupOnClose) {

        /** The settings in {@code properties}; {@link IllegalArgumentException} names what is missing or wrong. */
        public static Settings of(Properties properties) {
            List<String> missing = new ArrayList<>();
            for (String key : REQUIRED) {
                if (properties.getProperty(key, "").isBlank()) {
                    missing.add(key);
                }
            }
            for (String key : List.of(StreamsConfig.APPLICATION_ID_CONFIG, StreamsConfig.BOOTSTRAP_SERVERS_CONFIG)) {
                if (properties.getProperty(key, "").isBlank()) {
                    missing.add(key);
                }
            }
            if (!missing.isEmpty()) {
                throw new IllegalArgumentException("missing required setting(s): " + String.join(", ", missing));
            }
            String windowText = properties.getProperty(WINDOW_MS, Long.toString(DEFAULT_WINDOW_MS)).trim();
            long windowMs;
            try {
                windowMs = Long.parseLong(windowText);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(WINDOW_MS + " is " + windowText + ", not a number of milliseconds");
            }
            if (windowMs <= 0) {
                throw new IllegalArgumentException(WINDOW_MS + " is " + windowMs + "; a window lasts at least 1 ms");
            }
            String leave = properties.getProperty(CLOSE_LEAVE_GROUP, "true").trim();
            if (!leave.equalsIgnoreCase("true") && !leave.equalsIgnoreCase("false")) {
                throw new IllegalArgumentException(CLOSE_LEAVE_GROUP + " is " + leave + ", not true or false");
            }
            return new Settings(properties.getProperty(INPUT).trim(), properties.getProperty(TABLE).trim(),
                    properties.getProperty(OUTPUT_COUNTS).trim(), properties.getProperty(OUTPUT_WINDOWED).trim(),
                    properties.getProperty(OUTPUT_JOINED).trim(), Duration.ofMillis(windowMs),
                    Boolean.parseBoolean(leave));
        }
    }

    /** The Kafka Streams settings: every key but the app's own, over this app's defaults. */
    public static Properties streamsConfig(Properties properties) {
        Properties config = new Properties();
        config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        config.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        config.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        for (String key : properties.stringPropertyNames()) {
            if (!key.startsWith("app.")) {
                config.put(key, properties.getProperty(key));
            }
        }
        return config;
    }

    /** The topology: the count per key, the windowed count and the stream-table join (see the class). */
    public static Topology topology(Settings settings) {
        Serde<String> text = Serdes.String();
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> input = builder.stream(settings.input(), Consumed.with(text, text));
        KGroupedStream<String, String> byKey = input.groupByKey(Grouped.with(text, text));

        byKey.count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(COUNTS_STORE)
                        .withKeySerde(text).withValueSerde(Serdes.Long()))
                .toStream()
                .mapValues(count -> Long.toString(count))
                .to(settings.counts(), Produced.with(text, text));

        byKey.windowedBy(TimeWindows.ofSizeWithNoGrace(settings.window()))
                .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as(WINDOWED_STORE)
                        .withKeySerde(text).withValueSerde(Serdes.Long()))
                .toStream()
                .map((window, count) -> KeyValue.pair(window.key() + "@" + window.window().start(),
                        Long.toString(count)))
                .to(settings.windowed(), Produced.with(text, text));

        KTable<String, String> table = builder.table(settings.table(), Consumed.with(text, text),
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(TABLE_STORE)
                        .withKeySerde(text).withValueSerde(text));
        input.join(table, (value, tableValue) -> value + "|" + tableValue, Joined.with(text, text, text))
                .to(settings.joined(), Produced.with(text, text));
        return builder.build();
    }

    static void say(String line) {
        synchronized (OUT) {
            OUT.println(line);
            OUT.flush();
        }
    }

    static String describe(Throwable error) {
        StringBuilder text = new StringBuilder(error.getClass().getName()).append(": ").append(error.getMessage());
        for (Throwable cause = error.getCause(); cause != null && cause != cause.getCause(); cause = cause.getCause()) {
            text.append(" (caused by ").append(cause.getClass().getName()).append(": ").append(cause.getMessage())
                    .append(')');
        }
        return text.toString().replace('\n', ' ');
    }

    static Properties load(Path path) throws IOException {
        Properties properties = new Properties();
        try (Reader reader = Files.newBufferedReader(path, StandardCharsets.UTF_8)) {
            properties.load(reader);
        }
        return properties;
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 1) {
            System.err.println("usage: StatefulApp <settings.properties> (Kafka Streams settings and the app. keys; "
                    + "see the class's documentation)");
            System.exit(EXIT_USAGE);
        }
        Properties properties;
        Settings settings;
        try {
            properties = load(Path.of(args[0]));
            settings = Settings.of(properties);
        } catch (IOException e) {
            System.err.println("error: cannot read the settings file " + args[0] + ": " + e);
            System.exit(EXIT_USAGE);
            return;
        } catch (IllegalArgumentException e) {
            System.err.println("error: the settings file " + args[0] + " is refused: " + e.getMessage());
            System.exit(EXIT_USAGE);
            return;
        }

        KafkaStreams streams;
        try {
            streams = new KafkaStreams(topology(settings), streamsConfig(properties));
        } catch (RuntimeException e) {  // a setting Kafka Streams refuses (ConfigException and the like)
            System.err.println("error: Kafka Streams refused the settings in " + args[0] + ": " + describe(e));
            System.exit(EXIT_USAGE);
            return;
        }
        CountDownLatch failed = new CountDownLatch(1);
        AtomicInteger status = new AtomicInteger(0);
        streams.setStateListener((now, before) -> {
            say("STATE " + now);
            if (now == KafkaStreams.State.ERROR) {
                failed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(error -> {
            say("FATAL " + describe(error));
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        CloseOptions close = CloseOptions.timeout(CLOSE_TIMEOUT).withGroupMembershipOperation(
                settings.leaveGroupOnClose() ? CloseOptions.GroupMembershipOperation.LEAVE_GROUP
                        : CloseOptions.GroupMembershipOperation.REMAIN_IN_GROUP);
        // SIGTERM (or System.exit below) runs this hook. A JVM ended by SIGTERM would exit 143 after its hooks:
        // halt with the status decided here instead (0: closed cleanly).
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            boolean closed = streams.close(close);
            if (!closed) {
                say("CLOSE TIMED OUT after " + CLOSE_TIMEOUT.toSeconds() + " s");
                status.compareAndSet(0, EXIT_CLOSE_TIMED_OUT);
            }
            say("STOPPED");
            System.err.flush();
            Runtime.getRuntime().halt(status.get());
        }, "stateful-app-close"));
        try {
            streams.start();
        } catch (RuntimeException e) {
            say("FATAL " + describe(e));
            status.set(EXIT_FAILED);
            System.exit(EXIT_FAILED);
        }
        failed.await();  // until the client is in ERROR; a SIGTERM ends the process from the hook
        status.set(EXIT_FAILED);
        System.exit(EXIT_FAILED);
    }
}
