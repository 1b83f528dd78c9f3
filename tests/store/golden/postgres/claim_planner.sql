
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
set_config('enable_material', 'off', true), set_config('jit', 'off', true), set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true)
