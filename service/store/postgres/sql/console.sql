-- fragment: session_end
-- When a console session ends whatever happens: :lifetime seconds after the login.
{{now}} + make_interval(secs => :lifetime::float8)

-- fragment: idle_since(column, seconds)
-- The instant in column is more than :seconds seconds before now.
{column} < {{now}} - make_interval(secs => :{seconds}::float8)
